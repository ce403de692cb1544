//! A pool job on this machine: placed on a worker, each node's `run`
//! starts in the worker's node of the same rank (its directory, network,
//! files and environment, the job's own on top), and is lost with it.

use super::NODE_MARKER_VAR;
use super::agent::{KILL_REQUEST, Launch};
use super::backend::{GroupRun, Local, NodeState, append_log, bash, node_info};
use super::env::job_env;
use super::files::NodeFiles;
use super::spawner::Spawner;
use crate::backend::Report;
use crate::paths;
use crate::policy::{Attempt, Event, Phase};
use crate::pool::Placement;
use rustix::process::Pid;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;

impl GroupRun {
    /// A worker's node `rank` is held: its setup ended well and its hold
    /// runs.
    pub(super) fn holds(&self, rank: u32) -> bool {
        self.nodes[0].get(rank as usize).is_some_and(|n| {
            matches!(
                n.state,
                NodeState::Running {
                    phase: Phase::Run,
                    ..
                }
            )
        })
    }

    /// A pool job whose worker was lost: its running nodes are stopped,
    /// and their ends are losses.
    pub(super) fn lose_worker(&mut self) {
        if self.worker_lost {
            return;
        }
        self.worker_lost = true;
        for node in self.nodes.iter().flatten() {
            if let NodeState::Running { pidfd, .. } = &node.state {
                let _ = rustix::process::pidfd_send_signal(pidfd, KILL_REQUEST);
            }
        }
    }
}

impl Local {
    /// A worker's node ended (its hold was killed, its agent lost): the
    /// jobs on it are lost with it, and are stopped now.
    pub(super) fn lose_jobs_on(&mut self, worker: i64) {
        for job in self.groups.values_mut() {
            if job.worker == Some(worker) {
                job.lose_worker();
            }
        }
    }

    /// Starts a pool job's attempt on its worker: each node's `run` in the
    /// worker's node of the same rank.
    fn start_job(
        &mut self,
        gid: i64,
        g: &mut GroupRun,
        worker_gid: i64,
        placement: &Placement,
    ) -> Result<(), String> {
        let task = 0;
        let attempt = g.attempts[task];
        let worker = self.groups.get(&worker_gid).ok_or("its worker is gone")?;
        if !(0..g.plan.tasks[task].num_nodes).all(|rank| worker.holds(rank)) {
            return Err("its worker is not ready".into());
        }
        let mut spawned = Vec::new();
        for rank in 0..g.plan.tasks[task].num_nodes {
            let gpus = placement
                .gpus
                .get(rank as usize)
                .cloned()
                .unwrap_or_default();
            let started =
                spawn_job_agent(&mut self.spawner, &self.files, gid, g, worker, rank, &gpus)
                    .map_err(|e| format!("cannot start the node: {e}"));
            spawned.push(started);
        }
        for (rank, started) in (0..).zip(spawned) {
            match started.and_then(|(pid, pidfd)| {
                let slot = self
                    .watch(gid, task, rank, &pidfd)
                    .map_err(|e| e.to_string())?;
                Ok((pid, pidfd, slot))
            }) {
                Ok((pid, pidfd, slot)) => {
                    g.nodes[task][rank as usize].state = NodeState::Running {
                        phase: Phase::Run,
                        pid,
                        pidfd,
                        slot,
                    };
                    let mut info = node_info(g, task, rank, Some(pid), None);
                    info.machine = format!("worker {worker_gid}");
                    self.reports.push((gid, Report::Node(info)));
                }
                Err(e) => self.not_started(gid, g, task, rank, Phase::Run, &e),
            }
        }
        self.event(gid, Event::TaskStarted { task, attempt });
        Ok(())
    }

    /// Places attempt `attempt` of job `job` on `worker`'s nodes (the
    /// pool chose them): started there when it has not started, lost
    /// with the worker when it was found running on one lost meanwhile.
    pub(super) fn place_job(
        &mut self,
        job: i64,
        attempt: Attempt,
        worker: i64,
        placement: &Placement,
    ) {
        let Some(mut g) = self.groups.remove(&job) else {
            return;
        };
        let task = 0;
        let current = g.attempts[task] == attempt && !g.ended[task];
        let unstarted = g.nodes[task]
            .iter()
            .all(|n| n.attempt == attempt && matches!(n.state, NodeState::Idle));
        if current {
            g.worker = Some(worker);
            // Found running after a crash on a worker that was lost
            // meanwhile: lost with it.
            let holding = self
                .groups
                .get(&worker)
                .is_some_and(|w| (0..w.plan.tasks[0].num_nodes).all(|rank| w.holds(rank)));
            if !unstarted && !holding {
                g.lose_worker();
            }
        }
        if current
            && unstarted
            && let Err(reason) = self.start_job(job, &mut g, worker, placement)
        {
            // Placed on a worker that cannot take it: lost with it, so its
            // engine restarts it without using its budget.
            for rank in 0..g.plan.tasks[task].num_nodes {
                append_log(&g, task, rank, &format!("skyc: {reason}\n"));
                g.nodes[task][rank as usize].state = NodeState::Done;
                self.event(
                    job,
                    Event::NodeLost {
                        task,
                        attempt,
                        node: rank,
                    },
                );
            }
        }
        self.groups.insert(job, g);
    }
}

/// A pool job's node `rank` on its worker: the job's `run`, in the
/// worker's node directory and network, with the worker's environment
/// and the job's own on top.
fn spawn_job_agent(
    spawner: &mut Spawner,
    files: &NodeFiles,
    gid: i64,
    job: &GroupRun,
    worker: &GroupRun,
    rank: u32,
    gpus: &[u32],
) -> io::Result<(Pid, OwnedFd)> {
    let task = 0;
    let attempt = job.attempts[task];
    let adir = paths::attempt_dir(&paths::node_dir(&job.dir, task, rank), attempt, Phase::Run);
    fs::create_dir_all(&adir)?;
    // The pool's files, as submitted, under a writable layer of the job's
    // own.
    let mounts = &worker.plan.tasks[0].files;
    let volumes = &worker.plan.tasks[0].volumes;
    let buckets = &worker.plan.tasks[0].buckets;
    let cwd = match &worker.plan.tasks[0].workdir {
        _ if !mounts.is_empty() || !volumes.is_empty() || !buckets.is_empty() => adir.clone(),
        Some(dir) => dir.clone(),
        None => paths::node_dir(&worker.dir, 0, rank).join("work"),
    };
    let net = worker
        .net
        .node(0, rank)
        .ok_or_else(|| io::Error::other("the worker's node has no address"))?;
    let worker_grant = worker.grants[0].clone().unwrap_or_default();
    let mut env = job_env(
        &job.plan,
        gid,
        &worker.plan,
        &worker.net,
        &worker_grant,
        rank,
        gpus,
    );
    env.push((NODE_MARKER_VAR.into(), adir.display().to_string()));
    let command = bash(&paths::script(&job.dir, task, Phase::Run));
    let argv = worker.net.wrap(
        net,
        files.wrap(mounts, volumes, buckets, &env, &adir.join("files"), command),
    );
    let log = paths::log(&job.dir, &job.plan.tasks[task].name, rank);
    spawner.spawn(Launch {
        dir: &adir,
        log: &log,
        argv,
        env,
        cwd: &cwd,
    })
}
