//! The local backend: a group's nodes as node agents on this machine.
//!
//! It turns the engine's `Start`, `Terminate` and `Kill` into agents and
//! signals, queues attempts until the machine's capacity fits them, holds
//! each task's nodes at the setup barrier, and reports what the agents
//! record (exit statuses, lost nodes) as engine events. Node exits wake the
//! supervisor through one epoll descriptor holding every agent's pidfd.
//!
//! Crash model: an agent outlives the supervisor and records its node's
//! exit status in its attempt directory; a new supervisor's [`Local`]
//! re-adopts live agents by those directories and reports the exits
//! recorded while nobody watched.

use super::agent::{self, KILL_REQUEST, Launch};
use super::capacity::{Allocator, Capacity, Grant, Holder};
use super::env::node_env;
use super::files::NodeFiles;
use super::network::{self, GroupNetwork};
use super::plan::Plan;
use super::spawner::Spawner;
use super::{NODE_MARKER_VAR, logindex};
use crate::backend::{Adoption, Backend, NodeInfo, Report, Role};
use crate::paths;
use crate::policy::{Action, Attempt, Engine, Event, Phase, TaskId};
use crate::pool::Placement;
use rustix::event::{Timespec, epoll};
use rustix::process::{Pid, Signal, WaitOptions};
use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

pub struct Local {
    state_dir: PathBuf,
    /// Starts the node agents (skyc's executable, with the agent beside
    /// it).
    pub(super) spawner: Spawner,
    /// Gives nodes their task's files.
    pub(super) files: NodeFiles,
    allocator: Allocator,
    pub(super) groups: BTreeMap<i64, GroupRun>,
    /// Task attempts waiting for capacity, oldest first, and whether the
    /// wait was reported (as `TaskQueued`).
    queue: VecDeque<(i64, TaskId, Attempt, bool)>,
    /// Every running agent's pidfd, keyed by a slot in `slots`.
    epoll: OwnedFd,
    slots: BTreeMap<u64, (i64, TaskId, u32)>,
    next_slot: u64,
    pub(super) reports: Vec<(i64, Report)>,
}

pub(super) struct GroupRun {
    pub(super) dir: PathBuf,
    /// As `skyc status` shows it (a pool's worker: `{pool}-{n}`).
    name: String,
    pub(super) plan: Plan,
    pub(super) net: GroupNetwork,
    /// Per task, per rank.
    pub(super) nodes: Vec<Vec<NodeRun>>,
    pub(super) grants: Vec<Option<Grant>>,
    /// The engine as last executed: each task's attempt, whether it has
    /// ended, and whether the whole group has.
    pub(super) attempts: Vec<Attempt>,
    pub(super) ended: Vec<bool>,
    finished: bool,
    settled: bool,
    /// A pool job: the worker its attempt runs on, once placed.
    pub(super) worker: Option<i64>,
    /// A pool job whose worker was lost: its nodes' ends are losses.
    pub(super) worker_lost: bool,
    /// Per task, why it waits for the machine, as last reported.
    waiting: Vec<Option<String>>,
}

pub(super) struct NodeRun {
    pub(super) attempt: Attempt,
    pub(super) state: NodeState,
}

pub(super) enum NodeState {
    /// Not started in this attempt (or waiting for capacity).
    Idle,
    Running {
        phase: Phase,
        pid: Pid,
        /// In the epoll set while held; dropping it takes it out. Signals
        /// go through it: the pid alone may be reused once the agent has
        /// ended and its parent (the spawn helper) has reaped it.
        pidfd: OwnedFd,
        slot: u64,
    },
    /// Setup ended well; waiting for the task's other nodes to finish
    /// theirs before `run` starts on all of them.
    SetupDone,
    Done,
}

impl Local {
    /// The backend of `state_dir`; `exe` is skyc's executable (the spawn
    /// helper).
    pub fn new(state_dir: &Path, exe: PathBuf) -> io::Result<Self> {
        Ok(Self {
            state_dir: state_dir.to_owned(),
            files: NodeFiles::new(state_dir, exe.clone()),
            spawner: Spawner::new(exe, state_dir.to_owned()),
            allocator: Allocator::new(Capacity::detect()),
            groups: BTreeMap::new(),
            queue: VecDeque::new(),
            epoll: epoll::create(epoll::CreateFlags::CLOEXEC)?,
            slots: BTreeMap::new(),
            next_slot: 0,
            reports: Vec::new(),
        })
    }

    pub(super) fn event(&mut self, gid: i64, event: Event) {
        self.reports
            .push((gid, Report::Event { event, at_ms: None }));
    }

    /// Rebuilds a task's nodes from their directories: adopts live agents,
    /// reports exits recorded while no supervisor ran, and starts what was
    /// decided but never started.
    fn recover_task(&mut self, gid: i64, g: &mut GroupRun, engine: &Engine, task: TaskId) {
        let attempt = engine.attempt(task);
        let live: Vec<u32> = (0..g.plan.tasks[task].num_nodes)
            .filter(|&r| engine.node_live(task, r))
            .collect();
        if live.is_empty() {
            for node in &mut g.nodes[task] {
                node.state = NodeState::Done;
            }
            return;
        }
        let mut launched = false;
        for rank in 0..g.plan.tasks[task].num_nodes {
            g.nodes[task][rank as usize].attempt = attempt;
            if !live.contains(&rank) {
                g.nodes[task][rank as usize].state = NodeState::Done;
                continue;
            }
            let node_dir = paths::node_dir(&g.dir, task, rank);
            let run_dir = paths::attempt_dir(&node_dir, attempt, Phase::Run);
            let setup_dir = paths::attempt_dir(&node_dir, attempt, Phase::Setup);
            let (phase, adir) = if run_dir.exists() {
                (Phase::Run, run_dir)
            } else if setup_dir.exists() {
                (Phase::Setup, setup_dir)
            } else {
                continue;
            };
            launched = true;
            let code = agent::read_exit(&adir);
            if code.is_none()
                && let Some((pid, pidfd)) = agent::adopt(&adir)
            {
                match self.watch(gid, task, rank, &pidfd) {
                    Ok(slot) => {
                        g.nodes[task][rank as usize].state = NodeState::Running {
                            phase,
                            pid,
                            pidfd,
                            slot,
                        }
                    }
                    Err(_) => self.settle(gid, g, task, rank, phase, None, &adir),
                }
            } else {
                // The agent writes `exit` before it ends: one that ended
                // between the read above and `adopt` left it, and is read
                // again now that it is gone, lest a node that ended be
                // taken for lost and run again.
                let code = code.or_else(|| agent::read_exit(&adir));
                self.settle(gid, g, task, rank, phase, code, &adir);
            }
        }
        if launched && g.plan.pool_job.is_some() {
            // A pool job's nodes start on their worker, all at once: one
            // the crash kept from starting is lost with its attempt, which
            // then runs again without using the job's budget.
            for rank in 0..g.plan.tasks[task].num_nodes {
                if matches!(g.nodes[task][rank as usize].state, NodeState::Idle) {
                    g.nodes[task][rank as usize].state = NodeState::Done;
                    self.event(
                        gid,
                        Event::NodeLost {
                            task,
                            attempt,
                            node: rank,
                        },
                    );
                }
            }
        } else if launched {
            let grant = read_grant(&g.dir, task, attempt).unwrap_or_default();
            self.allocator.restore(&grant);
            g.grants[task] = Some(grant);
            // Nodes the crash kept from starting start now; the barrier
            // then starts `run` when all setups are done.
            for rank in 0..g.plan.tasks[task].num_nodes {
                if matches!(g.nodes[task][rank as usize].state, NodeState::Idle) {
                    let phase = first_phase(&g.plan, task);
                    self.spawn_node(gid, g, task, rank, phase);
                }
            }
            self.barrier(gid, g, task);
            if g.plan.hold
                && g.nodes[task].iter().all(|n| {
                    matches!(
                        n.state,
                        NodeState::Running {
                            phase: Phase::Run,
                            ..
                        }
                    )
                })
            {
                self.reports.push((gid, Report::Ready { task, attempt }));
            }
        } else if g.plan.pool_job.is_none() {
            self.queue.push_back((gid, task, attempt, false));
        }
    }

    pub(super) fn watch(
        &mut self,
        gid: i64,
        task: TaskId,
        rank: u32,
        pidfd: &OwnedFd,
    ) -> io::Result<u64> {
        let slot = self.next_slot;
        self.next_slot += 1;
        epoll::add(
            &self.epoll,
            pidfd,
            epoll::EventData::new_u64(slot),
            epoll::EventFlags::IN,
        )?;
        self.slots.insert(slot, (gid, task, rank));
        Ok(slot)
    }

    /// Signals the running nodes of an attempt; nodes with nothing running
    /// are answered for at once.
    fn stop(&mut self, gid: i64, g: &mut GroupRun, task: TaskId, attempt: Attempt, signal: Signal) {
        let this = |q: &(i64, TaskId, Attempt, bool)| (q.0, q.1, q.2) == (gid, task, attempt);
        let queued = self.queue.iter().any(this);
        self.queue.retain(|q| !this(q));
        for rank in 0..g.nodes[task].len() {
            let node = &mut g.nodes[task][rank];
            if node.attempt != attempt {
                continue;
            }
            let node_id = rank as u32;
            match &node.state {
                NodeState::Running { pidfd, .. } => {
                    let _ = rustix::process::pidfd_send_signal(pidfd, signal);
                }
                NodeState::SetupDone => {
                    node.state = NodeState::Done;
                    self.event(
                        gid,
                        Event::NodeExited {
                            task,
                            attempt,
                            node: node_id,
                            phase: Phase::Run,
                            code: 128 + Signal::TERM.as_raw(),
                        },
                    );
                }
                NodeState::Idle if queued || g.plan.pool_job.is_some() => {
                    node.state = NodeState::Done;
                    self.event(
                        gid,
                        Event::NodeLost {
                            task,
                            attempt,
                            node: node_id,
                        },
                    );
                }
                NodeState::Idle | NodeState::Done => {}
            }
        }
        self.release_if_done(g, task);
    }

    /// Starts queued attempts that now fit, oldest first; one that does
    /// not fit does not hold back smaller ones behind it.
    fn try_queue(&mut self) {
        let mut waiting = std::mem::take(&mut self.queue);
        let mut still = VecDeque::new();
        // Who holds what, once a pass (only if something waits on).
        let mut holders: Option<Vec<Holder>> = None;
        while let Some((gid, task, attempt, reported)) = waiting.pop_front() {
            let Some(mut g) = self.groups.remove(&gid) else {
                continue;
            };
            if g.attempts[task] != attempt || g.ended[task] {
                self.groups.insert(gid, g);
                continue;
            }
            let t = &g.plan.tasks[task];
            match self.allocator.allocate(t.demand, t.num_nodes) {
                Some(grant) => {
                    let _ = write_grant(&g.dir, task, attempt, &grant);
                    g.grants[task] = Some(grant);
                    if g.waiting[task].take().is_some() {
                        self.reports
                            .push((gid, Report::Waiting { task, why: None }));
                    }
                    let phase = first_phase(&g.plan, task);
                    for rank in 0..g.plan.tasks[task].num_nodes {
                        self.spawn_node(gid, &mut g, task, rank, phase);
                    }
                    self.event(gid, Event::TaskStarted { task, attempt });
                    if g.plan.hold && phase == Phase::Run {
                        self.reports.push((gid, Report::Ready { task, attempt }));
                    }
                }
                None => {
                    if !reported {
                        self.event(gid, Event::TaskQueued { task, attempt });
                    }
                    let holders = holders
                        .get_or_insert_with(|| holders_of(self.groups.iter().chain([(&gid, &g)])));
                    let why = self.allocator.why_waiting(
                        &g.plan.tasks[task].demand,
                        g.plan.tasks[task].num_nodes,
                        holders,
                    );
                    if g.waiting[task].as_ref() != Some(&why) {
                        g.waiting[task] = Some(why.clone());
                        self.reports.push((
                            gid,
                            Report::Waiting {
                                task,
                                why: Some(why),
                            },
                        ));
                    }
                    still.push_back((gid, task, attempt, true));
                }
            }
            self.groups.insert(gid, g);
        }
        // Entries queued while this ran come after the ones still waiting.
        still.extend(std::mem::take(&mut self.queue));
        self.queue = still;
    }

    fn spawn_node(&mut self, gid: i64, g: &mut GroupRun, task: TaskId, rank: u32, phase: Phase) {
        let attempt = g.nodes[task][rank as usize].attempt;
        let started = self
            .spawn_agent(gid, g, task, rank, attempt, phase)
            .and_then(|(pid, pidfd)| {
                let slot = self.watch(gid, task, rank, &pidfd)?;
                Ok((pid, pidfd, slot))
            });
        match started {
            Ok((pid, pidfd, slot)) => {
                g.nodes[task][rank as usize].state = NodeState::Running {
                    phase,
                    pid,
                    pidfd,
                    slot,
                };
                let info = node_info(g, task, rank, Some(pid), None);
                self.reports.push((gid, Report::Node(info)));
            }
            Err(e) => self.not_started(
                gid,
                g,
                task,
                rank,
                phase,
                &format!("cannot start the node: {e}"),
            ),
        }
    }

    fn spawn_agent(
        &mut self,
        gid: i64,
        g: &GroupRun,
        task: TaskId,
        rank: u32,
        attempt: Attempt,
        phase: Phase,
    ) -> io::Result<(Pid, OwnedFd)> {
        let node_dir = paths::node_dir(&g.dir, task, rank);
        let adir = paths::attempt_dir(&node_dir, attempt, phase);
        fs::create_dir_all(&adir)?;
        let mounts = &g.plan.tasks[task].files;
        let volumes = &g.plan.tasks[task].volumes;
        let buckets = &g.plan.tasks[task].buckets;
        let cwd = match &g.plan.tasks[task].workdir {
            // The files helper enters the workdir once it is in place.
            _ if !mounts.is_empty() || !volumes.is_empty() || !buckets.is_empty() => adir.clone(),
            Some(dir) => dir.clone(),
            None => {
                let work = node_dir.join("work");
                fs::create_dir_all(&work)?;
                work
            }
        };
        let net = g
            .net
            .node(task, rank)
            .ok_or_else(|| io::Error::other("node has no address"))?;
        let grant = g.grants[task].clone().unwrap_or_default();
        let mut env = node_env(&g.plan, gid, &g.net, &grant, task, rank, phase);
        env.push((NODE_MARKER_VAR.into(), adir.display().to_string()));
        let command = bash(&paths::script(&g.dir, task, phase));
        let command = self.files.wrap(
            mounts,
            volumes,
            buckets,
            &env,
            &paths::layers(&node_dir, attempt),
            command,
        );
        let argv = g.net.wrap(net, command);
        let log = paths::log(&g.dir, &g.plan.tasks[task].name, rank);
        let launch = Launch {
            dir: &adir,
            log: &log,
            argv,
            env,
            cwd: &cwd,
        };
        self.spawner.spawn(launch)
    }

    fn on_agent_exit(&mut self, slot: u64, gid: i64, task: TaskId, rank: u32) {
        let Some(mut g) = self.groups.remove(&gid) else {
            self.slots.remove(&slot);
            return;
        };
        let node = &mut g.nodes[task][rank as usize];
        let NodeState::Running {
            phase,
            pid,
            slot: running,
            ..
        } = node.state
        else {
            self.groups.insert(gid, g);
            return;
        };
        if running != slot {
            self.groups.insert(gid, g);
            return;
        };
        // Our own child when the supervisor started it itself; reap it.
        let _ = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG);
        let attempt = node.attempt;
        let adir = paths::attempt_dir(&paths::node_dir(&g.dir, task, rank), attempt, phase);
        let code = agent::read_exit(&adir);
        self.settle(gid, &mut g, task, rank, phase, code, &adir);
        let info = node_info(&g, task, rank, None, code);
        self.reports.push((gid, Report::Node(info)));
        self.barrier(gid, &mut g, task);
        self.release_if_done(&mut g, task);
        self.groups.insert(gid, g);
    }

    /// What a node's ended agent left: `code` is the exit status it
    /// recorded, `None` when the agent itself died (the node is lost). A
    /// setup that ended well waits for the task's barrier; anything else
    /// goes to the engine.
    #[allow(clippy::too_many_arguments)]
    fn settle(
        &mut self,
        gid: i64,
        g: &mut GroupRun,
        task: TaskId,
        rank: u32,
        phase: Phase,
        code: Option<i32>,
        adir: &Path,
    ) {
        if let NodeState::Running { slot, .. } = g.nodes[task][rank as usize].state {
            // Closing the pidfd (below) takes it out of the epoll set.
            self.slots.remove(&slot);
        }
        let attempt = g.nodes[task][rank as usize].attempt;
        let code = if g.worker_lost { None } else { code };
        if g.plan.hold && !(code == Some(0) && phase == Phase::Setup) {
            self.lose_jobs_on(gid);
        }
        let (state, event) = match code {
            Some(0) if phase == Phase::Setup => (NodeState::SetupDone, None),
            Some(code) => (
                NodeState::Done,
                Some(Event::NodeExited {
                    task,
                    attempt,
                    node: rank,
                    phase,
                    code,
                }),
            ),
            None => {
                kill_orphans(adir);
                append_log(g, task, rank, "skyc: node lost\n");
                (
                    NodeState::Done,
                    Some(Event::NodeLost {
                        task,
                        attempt,
                        node: rank,
                    }),
                )
            }
        };
        g.nodes[task][rank as usize].state = state;
        if let Some(event) = event {
            self.event(gid, event);
        }
    }

    /// A node whose agent could not be started: said in its log, and
    /// answered as a command not found (127).
    pub(super) fn not_started(
        &mut self,
        gid: i64,
        g: &mut GroupRun,
        task: TaskId,
        rank: u32,
        phase: Phase,
        why: &str,
    ) {
        append_log(g, task, rank, &format!("skyc: {why}\n"));
        let node = &mut g.nodes[task][rank as usize];
        node.state = NodeState::Done;
        let attempt = node.attempt;
        self.event(
            gid,
            Event::NodeExited {
                task,
                attempt,
                node: rank,
                phase,
                code: 127,
            },
        );
    }

    /// Starts `run` on every node of the task once all their setups ended
    /// well.
    fn barrier(&mut self, gid: i64, g: &mut GroupRun, task: TaskId) {
        if g.nodes[task]
            .iter()
            .all(|n| matches!(n.state, NodeState::SetupDone))
        {
            for rank in 0..g.nodes[task].len() as u32 {
                self.spawn_node(gid, g, task, rank, Phase::Run);
            }
            if g.plan.hold {
                let attempt = g.attempts[task];
                self.reports.push((gid, Report::Ready { task, attempt }));
            }
        }
    }

    fn release_if_done(&mut self, g: &mut GroupRun, task: TaskId) {
        let done = g.nodes[task]
            .iter()
            .all(|n| matches!(n.state, NodeState::Done));
        if done && let Some(grant) = g.grants[task].take() {
            self.allocator.release(&grant);
        }
    }

    /// Reports the group settled once its engine has finished and no node
    /// of it runs.
    fn check_settled(&mut self, gid: i64) {
        let Some(g) = self.groups.get_mut(&gid) else {
            return;
        };
        if !g.settled
            && g.finished
            && g.nodes
                .iter()
                .flatten()
                .all(|n| matches!(n.state, NodeState::Done | NodeState::Idle))
        {
            g.settled = true;
            self.reports.push((gid, Report::Settled));
        }
    }
}

impl Backend for Local {
    /// A new group gets its network (recorded with [`Report::Keep`]); one
    /// a previous supervisor ran gets its nodes back from their
    /// directories.
    fn adopt(&mut self, gid: i64, adoption: &Adoption<'_>) -> Result<(), String> {
        let mut plan: Plan = serde_json::from_str(adoption.plan).map_err(|e| e.to_string())?;
        plan.hold = adoption.role == Role::Worker;
        let dir = paths::group_dir(&self.state_dir, gid);
        let net = match adoption.kept.map(serde_json::from_str) {
            Some(Ok(net)) => net,
            Some(Err(e)) => return Err(e.to_string()),
            None if adoption.role == Role::Job => {
                fs::create_dir_all(dir.join("logs"))
                    .and_then(|()| write_scripts(&dir, &plan))
                    .map_err(|e| format!("{}: {e}", dir.display()))?;
                GroupNetwork::borrowed(&dir)
            }
            None => {
                let net = prepare(&plan, &dir, !adoption.fresh).inspect_err(|reason| {
                    for (task, rank) in plan.nodes() {
                        let log = paths::log(&dir, &plan.tasks[task].name, rank);
                        let line = format!("skyc: the group cannot start: {reason}\n");
                        let _ = logindex::append(&log, line.as_bytes());
                    }
                })?;
                let json = serde_json::to_string(&net).map_err(|e| e.to_string())?;
                self.reports.push((gid, Report::Keep(json)));
                net
            }
        };
        let engine = adoption.engine;
        let tasks = plan.tasks.len();
        let nodes = plan
            .tasks
            .iter()
            .map(|t| {
                (0..t.num_nodes)
                    .map(|_| NodeRun {
                        attempt: 0,
                        state: NodeState::Idle,
                    })
                    .collect()
            })
            .collect();
        let name = adoption
            .store
            .group(gid)
            .ok()
            .flatten()
            .map_or_else(|| plan.group.clone(), |row| row.name);
        let mut g = GroupRun {
            grants: vec![None; tasks],
            dir,
            name,
            plan,
            net,
            nodes,
            attempts: (0..tasks).map(|t| engine.attempt(t)).collect(),
            ended: (0..tasks)
                .map(|t| engine.task_status(t).is_terminal())
                .collect(),
            finished: engine.is_finished(),
            settled: false,
            worker: None,
            worker_lost: false,
            waiting: vec![None; tasks],
        };
        if !adoption.fresh {
            for task in 0..tasks {
                self.recover_task(gid, &mut g, engine, task);
            }
        }
        self.groups.insert(gid, g);
        self.check_settled(gid);
        Ok(())
    }

    fn execute(&mut self, gid: i64, engine: &Engine, actions: &[Action]) {
        let Some(g) = self.groups.get_mut(&gid) else {
            return;
        };
        for (task, attempt) in g.attempts.iter_mut().enumerate() {
            *attempt = engine.attempt(task);
            g.ended[task] = engine.task_status(task).is_terminal();
        }
        g.finished = engine.is_finished();
        for action in actions {
            let Some(mut g) = self.groups.remove(&gid) else {
                return;
            };
            match *action {
                Action::Start { task, attempt } => {
                    for node in &mut g.nodes[task] {
                        node.attempt = attempt;
                        node.state = NodeState::Idle;
                    }
                    if attempt > 0 {
                        note_restart(&g, task, attempt);
                    }
                    if g.plan.pool_job.is_some() {
                        // Its worker's resources are the pool's to count.
                        g.worker = None;
                        g.worker_lost = false;
                        self.event(gid, Event::TaskQueued { task, attempt });
                    } else {
                        self.queue.push_back((gid, task, attempt, false));
                    }
                }
                Action::Terminate { task, attempt, .. } => {
                    self.stop(gid, &mut g, task, attempt, Signal::TERM);
                }
                Action::Kill { task, attempt } => {
                    self.stop(gid, &mut g, task, attempt, KILL_REQUEST);
                }
                Action::SetTimer { .. } | Action::TaskStatus { .. } | Action::GroupStatus(_) => {}
            }
            self.groups.insert(gid, g);
        }
        self.try_queue();
        self.check_settled(gid);
    }

    /// The engine's `Terminate` and `Kill` stop everything of a cancelled
    /// group; nothing of it runs without the engine knowing.
    fn cancel(&mut self, _gid: i64) {}

    fn release(&mut self, gid: i64) {
        self.queue.retain(|q| q.0 != gid);
        let Some(g) = self.groups.remove(&gid) else {
            return;
        };
        for grant in g.grants.iter().flatten() {
            self.allocator.release(grant);
        }
        network::teardown(&g.net);
        super::files::discard_layers(&g.dir);
        self.try_queue();
    }

    fn sweep(&mut self, gid: i64, kept: &str) {
        if let Ok(net) = serde_json::from_str::<GroupNetwork>(kept) {
            network::teardown(&net);
        }
        super::files::discard_layers(&paths::group_dir(&self.state_dir, gid));
    }

    fn drain(&mut self, _now_ms: i64) -> Vec<(i64, Report)> {
        let mut ready = Vec::with_capacity(64);
        let none = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        loop {
            ready.clear();
            if epoll::wait(
                &self.epoll,
                rustix::buffer::spare_capacity(&mut ready),
                Some(&none),
            )
            .is_err()
            {
                break;
            }
            let exited: Vec<(u64, (i64, TaskId, u32))> = ready
                .iter()
                .filter_map(|e| Some((e.data.u64(), *self.slots.get(&e.data.u64())?)))
                .collect();
            let full = ready.len() == ready.capacity();
            for (slot, (gid, task, rank)) in exited {
                self.on_agent_exit(slot, gid, task, rank);
            }
            if !full {
                break;
            }
        }
        self.try_queue();
        let gids: Vec<i64> = self.groups.keys().copied().collect();
        for gid in gids {
            self.check_settled(gid);
        }
        std::mem::take(&mut self.reports)
    }

    fn runs_pools(&self) -> bool {
        true
    }

    fn place(&mut self, job: i64, attempt: Attempt, worker: i64, placement: &Placement) {
        self.place_job(job, attempt, worker, placement);
    }

    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.epoll.as_fd())
    }
}

/// What holds the machine: these groups and pool workers, each with what
/// it was granted.
fn holders_of<'a>(groups: impl Iterator<Item = (&'a i64, &'a GroupRun)>) -> Vec<Holder> {
    groups
        .flat_map(|(gid, h)| {
            // A worker by its name in `pool status`; a group by its
            // name and id, as `skyc status` lists it.
            let name = if h.plan.hold {
                h.name.clone()
            } else {
                format!("{} ({gid})", h.name)
            };
            h.grants.iter().flatten().map(move |grant| Holder {
                name: name.clone(),
                worker: h.plan.hold,
                grant: grant.clone(),
            })
        })
        .collect()
}

/// A new group's directory, scripts and network. `again`: the group was
/// adopted before (its supervisor died before it recorded the network),
/// so it may hold leases to give back.
fn prepare(plan: &Plan, dir: &Path, again: bool) -> Result<GroupNetwork, String> {
    fs::create_dir_all(dir.join("logs")).map_err(|e| format!("{}: {e}", dir.display()))?;
    write_scripts(dir, plan).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mode = network::resolve(plan.network)?;
    network::setup(plan, mode, dir, again)
}

fn first_phase(plan: &Plan, task: TaskId) -> Phase {
    if plan.tasks[task].setup.is_some() {
        Phase::Setup
    } else {
        Phase::Run
    }
}

pub(super) fn node_info(
    g: &GroupRun,
    task: TaskId,
    rank: u32,
    pid: Option<Pid>,
    code: Option<i32>,
) -> NodeInfo {
    let node = &g.nodes[task][rank as usize];
    let phase = match &node.state {
        NodeState::Running { phase, .. } => Some(*phase),
        _ => None,
    };
    NodeInfo {
        task,
        rank,
        attempt: node.attempt,
        hostname: g.plan.hostname(task, rank),
        pid: pid.map(|p| i64::from(p.as_raw_nonzero().get())),
        handle: String::new(),
        machine: String::new(),
        ip: g
            .net
            .node(task, rank)
            .map(|n| n.ip.to_string())
            .unwrap_or_default(),
        phase: phase.map(|p| paths::phase_name(p).to_owned()),
        exit_code: code,
    }
}

fn note_restart(g: &GroupRun, task: TaskId, attempt: Attempt) {
    for rank in 0..g.plan.tasks[task].num_nodes {
        append_log(
            g,
            task,
            rank,
            &format!(
                "skyc: restarting {} (attempt {attempt})\n",
                g.plan.tasks[task].name
            ),
        );
    }
}

pub(super) fn append_log(g: &GroupRun, task: TaskId, rank: u32, line: &str) {
    let log = paths::log(&g.dir, &g.plan.tasks[task].name, rank);
    let _ = logindex::append(&log, line.as_bytes());
}

/// A worker's `run`: the node is held, doing nothing, until the worker is
/// retired; a hold that ends by itself is the worker's loss.
const HOLD: &str = "exec sleep infinity\n";

fn write_scripts(dir: &Path, plan: &Plan) -> io::Result<()> {
    fs::create_dir_all(dir.join("scripts"))?;
    for (task, t) in plan.tasks.iter().enumerate() {
        for (phase, text) in [(Phase::Setup, &t.setup), (Phase::Run, &t.run)] {
            let text = match text.as_deref() {
                _ if plan.hold && phase == Phase::Run => HOLD,
                text => text.unwrap_or(""),
            };
            fs::write(paths::script(dir, task, phase), text)?;
        }
    }
    Ok(())
}

fn write_grant(dir: &Path, task: TaskId, attempt: Attempt, grant: &Grant) -> io::Result<()> {
    let tdir = paths::task_dir(dir, task);
    fs::create_dir_all(&tdir)?;
    let json = serde_json::to_string(grant).map_err(io::Error::other)?;
    paths::write_atomic(&tdir, &format!("grant-{attempt}.json"), &json)
}

fn read_grant(dir: &Path, task: TaskId, attempt: Attempt) -> Option<Grant> {
    let text = fs::read_to_string(paths::task_dir(dir, task).join(format!("grant-{attempt}.json")));
    serde_json::from_str(&text.ok()?).ok()
}

/// Kills what a lost node left running: every process that carries the
/// node's marker in its environment.
fn kill_orphans(adir: &Path) {
    agent::kill_carrying(&format!("{NODE_MARKER_VAR}={}", adir.display()));
}

/// How a node's phase script runs: bash without the user's start-up files.
pub(super) fn bash(script: &Path) -> Vec<String> {
    vec![
        "bash".into(),
        "--noprofile".into(),
        "--norc".into(),
        script.display().to_string(),
    ]
}
