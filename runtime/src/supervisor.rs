//! The supervisor: one process per state directory. It runs the
//! directory's local groups on this machine and watches those submitted
//! to Slurm ([`crate::slurm::Watch`]); clients (`skyc run`, `status`,
//! `cancel`) only write to the store and wake it.
//!
//! It drives one policy [`Engine`] per group. Node exits arrive as pidfd
//! readiness of the node agents, timers as poll timeouts, and client
//! requests (a new group, a cancel) as a wake-up on a Unix socket; the
//! store is the source of truth for all of them. For each event the
//! engine's decision is committed (engine state, statuses, timers and the
//! actions still to carry out) before any action touches a process, so a
//! supervisor killed at any point is replaced by one that re-adopts the
//! live agents, reads the exit statuses recorded while nobody watched, and
//! carries out what was decided but not done.

use crate::local::agent::{self, KILL_REQUEST, Launch};
use crate::local::capacity::{Allocator, Capacity, Grant};
use crate::local::env::node_env;
use crate::local::network::{self, GroupNetwork};
use crate::local::plan::Plan;
use crate::local::{NODE_MARKER_VAR, logindex, paths};
use crate::policy::{Action, Attempt, Engine, Event, Phase, TaskId, Timer};
use crate::slurm::{AdoptError, Adopted, Watch};
use crate::store::{Backend, NodeRow, Store, now_ms};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::process::{Pid, Signal, WaitOptions};
use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long a supervisor with nothing to run waits before it exits.
const IDLE_EXIT: Duration = Duration::from_secs(2);

/// How long before a Slurm group that could not be submitted or found
/// (slurmctld unreachable) is tried again.
const RETRY_ADOPT_MS: i64 = 5_000;

pub struct Supervisor {
    dir: PathBuf,
    store: Store,
    /// Where skyc's executable is (the node agent is beside it).
    exe: PathBuf,
    listener: UnixListener,
    allocator: Allocator,
    groups: BTreeMap<i64, GroupRun>,
    /// Groups submitted to Slurm.
    slurm: BTreeMap<i64, Box<Watch>>,
    /// Groups to take charge of again later (Slurm could not be asked),
    /// and when.
    retry: BTreeMap<i64, i64>,
    /// The last error logged per Slurm group, so a cluster that stays
    /// down is logged once, not every poll.
    slurm_errors: BTreeMap<i64, String>,
    /// Task attempts waiting for capacity, oldest first, and whether the
    /// wait was reported (as `TaskQueued`).
    queue: VecDeque<(i64, TaskId, Attempt, bool)>,
    /// Node rows to write at the end of the turn.
    dirty: Vec<(i64, NodeRow)>,
}

struct GroupRun {
    dir: PathBuf,
    plan: Plan,
    engine: Engine,
    net: GroupNetwork,
    /// Per task, per rank.
    nodes: Vec<Vec<NodeRun>>,
    grants: Vec<Option<Grant>>,
    timers: Vec<(Timer, i64)>,
    inbox: VecDeque<Event>,
}

struct NodeRun {
    attempt: Attempt,
    state: NodeState,
}

enum NodeState {
    /// Not started in this attempt (or waiting for capacity).
    Idle,
    Running {
        phase: Phase,
        pid: Pid,
        pidfd: OwnedFd,
    },
    /// Setup ended well; waiting for the task's other nodes to finish
    /// theirs before `run` starts on all of them.
    SetupDone,
    Done,
}

/// Starts a supervisor for `dir` unless one runs; returns when it is
/// answered or failed.
pub fn main(dir: &Path) -> io::Result<()> {
    // Node agents run in other directories and are found again by the
    // paths they were given.
    let dir = &std::path::absolute(dir)?;
    // Out of the caller's session: a Ctrl-C at the terminal of `skyc run`
    // is for the client, which turns it into a cancel.
    let _ = rustix::process::setsid();
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("supervisor.lock"))?;
    // A supervisor that is exiting still holds the lock for a moment.
    let mut tries = 0;
    while rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        tries += 1;
        if tries > 100 {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    raise_fd_limit();
    agent::write_atomic(dir, "supervisor.pid", &std::process::id().to_string())?;
    let socket = dir.join("supervisor.sock");
    let _ = fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket)?;
    listener.set_nonblocking(true)?;
    let mut supervisor = Supervisor {
        dir: dir.to_owned(),
        store: Store::open(dir).map_err(io::Error::other)?,
        exe: std::env::current_exe()?,
        listener,
        allocator: Allocator::new(Capacity::detect()),
        groups: BTreeMap::new(),
        slurm: BTreeMap::new(),
        retry: BTreeMap::new(),
        slurm_errors: BTreeMap::new(),
        queue: VecDeque::new(),
        dirty: Vec::new(),
    };
    let result = supervisor.run();
    // Clients that find no socket start a new supervisor; remove it before
    // the lock goes, so none is left waiting on a dead one.
    let _ = fs::remove_file(&socket);
    let _ = fs::remove_file(dir.join("supervisor.pid"));
    drop(lock);
    result
}

fn raise_fd_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

fn log(message: impl std::fmt::Display) {
    eprintln!("[{}] {message}", now_ms());
}

impl Supervisor {
    fn run(&mut self) -> io::Result<()> {
        self.cleanup_finished_networks();
        self.scan()?;
        let mut idle_since = None;
        loop {
            self.turn()?;
            if self.is_idle() {
                let since = *idle_since.get_or_insert_with(now_ms);
                if now_ms() - since >= IDLE_EXIT.as_millis() as i64 {
                    // A group may have arrived since the last scan.
                    self.scan()?;
                    if self.is_idle() {
                        return Ok(());
                    }
                }
            } else {
                idle_since = None;
            }
        }
    }

    fn is_idle(&self) -> bool {
        self.groups.is_empty() && self.slurm.is_empty() && self.retry.is_empty()
    }

    /// One wait for something to happen, and its handling.
    fn turn(&mut self) -> io::Result<()> {
        let next_timer = self
            .groups
            .values()
            .flat_map(|g| g.timers.iter().map(|t| t.1))
            .chain(self.slurm.values().map(|w| w.next_poll_ms()))
            .chain(self.retry.values().copied())
            .min();
        let wait_ms = match next_timer {
            Some(deadline) => (deadline - now_ms()).clamp(0, IDLE_EXIT.as_millis() as i64),
            None => IDLE_EXIT.as_millis() as i64,
        };
        let mut keys = Vec::new();
        let mut fds = vec![PollFd::new(&self.listener, PollFlags::IN)];
        for (&gid, g) in &self.groups {
            for (task, ranks) in g.nodes.iter().enumerate() {
                for (rank, node) in ranks.iter().enumerate() {
                    if let NodeState::Running { pidfd, .. } = &node.state {
                        fds.push(PollFd::new(pidfd, PollFlags::IN));
                        keys.push((gid, task, rank as u32));
                    }
                }
            }
        }
        let timeout = Timespec {
            tv_sec: wait_ms / 1000,
            tv_nsec: (wait_ms % 1000) * 1_000_000,
        };
        match poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        let wake = !fds[0].revents().is_empty();
        let exited: Vec<_> = fds[1..]
            .iter()
            .zip(&keys)
            .filter(|(fd, _)| !fd.revents().is_empty())
            .map(|(_, k)| *k)
            .collect();
        drop(fds);
        for (gid, task, rank) in exited {
            self.on_agent_exit(gid, task, rank);
        }
        let now = now_ms();
        for g in self.groups.values_mut() {
            let due: Vec<Timer> = g
                .timers
                .iter()
                .filter(|t| t.1 <= now)
                .map(|t| t.0)
                .collect();
            g.timers.retain(|t| t.1 > now);
            g.inbox.extend(due.into_iter().map(Event::TimerFired));
        }
        self.pump_all()?;
        self.poll_slurm(now_ms());
        if wake {
            self.answer_clients()?;
        } else if self.retry.values().any(|&at| at <= now_ms()) {
            self.scan()?;
        }
        Ok(())
    }

    /// Polls the Slurm groups that are due. A failing poll (slurmctld
    /// down, say) is retried at the next one: the job runs on regardless.
    fn poll_slurm(&mut self, now: i64) {
        let due: Vec<i64> = self
            .slurm
            .iter()
            .filter(|(_, w)| w.next_poll_ms() <= now)
            .map(|(&gid, _)| gid)
            .collect();
        for gid in due {
            let Some(watch) = self.slurm.get_mut(&gid) else {
                continue;
            };
            match watch.poll(&mut self.store, now) {
                Ok(false) => {
                    self.slurm_errors.remove(&gid);
                }
                Ok(true) => {
                    log(format_args!(
                        "group {gid} (Slurm job {}): {}",
                        watch.job(),
                        watch.group_status()
                    ));
                    self.slurm.remove(&gid);
                    self.slurm_errors.remove(&gid);
                }
                Err(e) => {
                    if self.slurm_errors.get(&gid) != Some(&e) {
                        log(format_args!("group {gid}: Slurm: {e}"));
                        self.slurm_errors.insert(gid, e);
                    }
                }
            }
        }
    }

    /// Reads the wake-ups of clients, picks up what they wrote to the
    /// store, and answers each once that is done.
    fn answer_clients(&mut self) -> io::Result<()> {
        let mut clients = Vec::new();
        while let Ok((stream, _)) = self.listener.accept() {
            clients.push(stream);
        }
        self.scan()?;
        for mut client in clients {
            let _ = client.set_nonblocking(false);
            let _ = client.set_read_timeout(Some(Duration::from_millis(200)));
            let mut line = String::new();
            let _ = BufReader::new(&client).read_line(&mut line);
            let _ = client.write_all(b"ok\n");
        }
        Ok(())
    }

    /// Starts new groups and passes on cancel requests.
    fn scan(&mut self) -> io::Result<()> {
        let live = self.store.live_groups().map_err(io::Error::other)?;
        let now = now_ms();
        for gid in live {
            if !self.groups.contains_key(&gid)
                && !self.slurm.contains_key(&gid)
                && self.retry.get(&gid).is_none_or(|&at| at <= now)
                && let Err(e) = self.adopt_any(gid)
            {
                log(format_args!("group {gid}: {e}"));
                self.fail_group(gid, &e)?;
                continue;
            }
            let state = self.store.runtime_state(gid).map_err(io::Error::other)?;
            if state.cancel_requested && !state.cancel_seen {
                self.store
                    .transaction(|tx| tx.mark_cancel_seen(gid))
                    .map_err(io::Error::other)?;
                if let Some(g) = self.groups.get_mut(&gid) {
                    g.inbox.push_back(Event::CancelRequested);
                }
                if let Some(w) = self.slurm.get_mut(&gid) {
                    w.cancel(now);
                }
            }
        }
        self.pump_all()
    }

    /// Takes charge of a group on its backend.
    fn adopt_any(&mut self, gid: i64) -> Result<(), String> {
        let backend = self
            .store
            .group(gid)
            .map_err(|e| e.to_string())?
            .map_or(Backend::Local, |g| g.backend);
        match backend {
            Backend::Local => self.adopt(gid).map_err(|e| e.to_string()),
            Backend::Slurm => {
                self.retry.remove(&gid);
                match Watch::adopt(&mut self.store, &self.dir, gid, now_ms()) {
                    Ok(Adopted::Watching(watch)) => {
                        log(format_args!("group {gid}: Slurm job {}", watch.job()));
                        self.slurm.insert(gid, watch);
                    }
                    Ok(Adopted::Cancelled) => {
                        log(format_args!("group {gid}: cancelled before submission"));
                    }
                    Err(AdoptError::Retry(e)) => {
                        log(format_args!("group {gid}: Slurm: {e}; trying again"));
                        self.retry.insert(gid, now_ms() + RETRY_ADOPT_MS);
                    }
                    Err(AdoptError::Fatal(e)) => return Err(e),
                }
                Ok(())
            }
        }
    }

    /// Takes charge of a group: a new one is started, one a previous
    /// supervisor ran is rebuilt from the store and the node directories.
    fn adopt(&mut self, gid: i64) -> io::Result<()> {
        let plan: Plan = serde_json::from_str(&self.store.plan(gid).map_err(io::Error::other)?)
            .map_err(io::Error::other)?;
        let state = self.store.runtime_state(gid).map_err(io::Error::other)?;
        let dir = paths::group_dir(&self.dir, gid);
        let net = match state.network.as_deref().map(serde_json::from_str) {
            Some(Ok(net)) => net,
            Some(Err(e)) => return Err(io::Error::other(e)),
            None => {
                fs::create_dir_all(dir.join("logs"))?;
                write_scripts(&dir, &plan)?;
                let mode = network::resolve(plan.network).map_err(io::Error::other)?;
                let net = network::setup(&plan, mode, &dir).map_err(io::Error::other)?;
                let json = serde_json::to_string(&net).map_err(io::Error::other)?;
                self.store
                    .transaction(|tx| tx.save_network(gid, &json))
                    .map_err(io::Error::other)?;
                net
            }
        };
        let fresh = state.engine.is_none();
        let engine = match state.engine.as_deref().map(serde_json::from_str) {
            Some(Ok(engine)) => engine,
            Some(Err(e)) => return Err(io::Error::other(e)),
            None => Engine::new(plan.spec.clone()),
        };
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
        let timers = self
            .store
            .timers(gid)
            .map_err(io::Error::other)?
            .into_iter()
            .filter_map(|(t, deadline)| Some((serde_json::from_str(&t).ok()?, deadline)))
            .collect();
        let mut g = GroupRun {
            grants: vec![None; plan.tasks.len()],
            dir,
            plan,
            engine,
            net,
            nodes,
            timers,
            inbox: VecDeque::new(),
        };
        if fresh {
            let actions = g.engine.start();
            self.groups.insert(gid, g);
            self.commit(gid, None, &actions)?;
            self.execute(gid, actions);
            return Ok(());
        }
        log(format_args!("group {gid}: re-adopting"));
        let pending: Vec<Action> = state
            .pending
            .as_deref()
            .and_then(|p| serde_json::from_str(p).ok())
            .unwrap_or_default();
        for task in 0..g.plan.tasks.len() {
            self.recover_task(gid, &mut g, task);
        }
        self.groups.insert(gid, g);
        // What was decided before the crash and may not have been done;
        // starts are covered by `recover_task`.
        let redo: Vec<Action> = pending
            .into_iter()
            .filter(|a| matches!(a, Action::Terminate { .. } | Action::Kill { .. }))
            .collect();
        self.execute(gid, redo);
        Ok(())
    }

    /// Rebuilds a task's nodes from their directories: adopts live agents,
    /// reports exits recorded while no supervisor ran, and starts what was
    /// decided but never started.
    fn recover_task(&mut self, gid: i64, g: &mut GroupRun, task: TaskId) {
        let attempt = g.engine.attempt(task);
        let live: Vec<u32> = (0..g.plan.tasks[task].num_nodes)
            .filter(|&r| g.engine.node_live(task, r))
            .collect();
        if live.is_empty() {
            for node in &mut g.nodes[task] {
                node.state = NodeState::Done;
            }
            return;
        }
        let mut launched = false;
        for rank in 0..g.plan.tasks[task].num_nodes {
            let node = &mut g.nodes[task][rank as usize];
            node.attempt = attempt;
            if !live.contains(&rank) {
                node.state = NodeState::Done;
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
                node.state = NodeState::Running { phase, pid, pidfd };
            } else {
                settle(g, task, rank, phase, code, &adir);
            }
        }
        if launched {
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
        } else {
            self.queue.push_back((gid, task, attempt, false));
        }
    }

    fn pump_all(&mut self) -> io::Result<()> {
        self.try_queue();
        let gids: Vec<i64> = self.groups.keys().copied().collect();
        for gid in gids {
            self.pump(gid)?;
        }
        self.flush_nodes()?;
        Ok(())
    }

    /// Hands a group's waiting events to its engine, one at a time.
    fn pump(&mut self, gid: i64) -> io::Result<()> {
        loop {
            let Some(g) = self.groups.get_mut(&gid) else {
                return Ok(());
            };
            let Some(event) = g.inbox.pop_front() else {
                break;
            };
            let actions = g.engine.handle(event.clone());
            self.commit(gid, Some(&event), &actions)?;
            self.execute(gid, actions);
            self.try_queue();
        }
        let done = self.groups.get(&gid).is_some_and(|g| {
            g.engine.is_finished()
                && g.nodes
                    .iter()
                    .flatten()
                    .all(|n| matches!(n.state, NodeState::Done | NodeState::Idle))
        });
        if done {
            self.finish(gid)?;
        }
        Ok(())
    }

    /// Records an event and the engine's answer, before any of it is
    /// carried out.
    fn commit(&mut self, gid: i64, event: Option<&Event>, actions: &[Action]) -> io::Result<()> {
        let Some(g) = self.groups.get_mut(&gid) else {
            return Ok(());
        };
        let now = now_ms();
        for action in actions {
            if let Action::SetTimer { timer, after } = action {
                g.timers.retain(|t| t.0 != *timer);
                g.timers.push((*timer, now + after.as_millis() as i64));
            }
        }
        let g = &*g;
        self.store
            .transaction(|tx| {
                if let Some(event) = event {
                    tx.append_event(gid, now, &json(event))?;
                    if let Event::TimerFired(timer) = event {
                        tx.delete_timer(gid, &json(timer))?;
                    }
                }
                for action in actions {
                    match action {
                        Action::SetTimer { timer, .. } => {
                            let deadline = g.timers.iter().find(|t| t.0 == *timer).map(|t| t.1);
                            tx.set_timer(gid, &json(timer), deadline.unwrap_or(now))?;
                        }
                        Action::GroupStatus(status) => tx.set_group_status(gid, status.as_str())?,
                        _ => {}
                    }
                }
                for task in 0..g.plan.tasks.len() {
                    tx.set_task(
                        gid,
                        task,
                        g.engine.task_status(task).as_str(),
                        g.engine.attempt(task),
                        g.engine.restarts(task),
                    )?;
                }
                let pending = actions
                    .iter()
                    .any(|a| matches!(a, Action::Terminate { .. } | Action::Kill { .. }))
                    .then(|| json(actions));
                tx.save_runtime(gid, &json(&g.engine), pending.as_deref())
            })
            .map_err(io::Error::other)
    }

    fn execute(&mut self, gid: i64, actions: Vec<Action>) {
        for action in actions {
            let Some(mut g) = self.groups.remove(&gid) else {
                return;
            };
            match action {
                Action::Start { task, attempt } => {
                    for node in &mut g.nodes[task] {
                        node.attempt = attempt;
                        node.state = NodeState::Idle;
                    }
                    if attempt > 0 {
                        note_restart(&g, task, attempt);
                    }
                    self.queue.push_back((gid, task, attempt, false));
                    self.groups.insert(gid, g);
                    self.try_queue();
                    continue;
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
                NodeState::Running { pid, .. } => {
                    let _ = rustix::process::kill_process(*pid, signal);
                }
                NodeState::SetupDone => {
                    node.state = NodeState::Done;
                    g.inbox.push_back(Event::NodeExited {
                        task,
                        attempt,
                        node: node_id,
                        phase: Phase::Run,
                        code: 128 + Signal::TERM.as_raw(),
                    });
                }
                NodeState::Idle if queued => {
                    node.state = NodeState::Done;
                    g.inbox.push_back(Event::NodeLost {
                        task,
                        attempt,
                        node: node_id,
                    });
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
        while let Some((gid, task, attempt, reported)) = waiting.pop_front() {
            let Some(mut g) = self.groups.remove(&gid) else {
                continue;
            };
            if g.engine.attempt(task) != attempt || g.engine.task_status(task).is_terminal() {
                self.groups.insert(gid, g);
                continue;
            }
            let t = &g.plan.tasks[task];
            match self.allocator.allocate(t.demand, t.num_nodes) {
                Some(grant) => {
                    let _ = write_grant(&g.dir, task, attempt, &grant);
                    g.grants[task] = Some(grant);
                    let phase = first_phase(&g.plan, task);
                    for rank in 0..g.plan.tasks[task].num_nodes {
                        self.spawn_node(gid, &mut g, task, rank, phase);
                    }
                    g.inbox.push_back(Event::TaskStarted { task, attempt });
                }
                None => {
                    if !reported {
                        g.inbox.push_back(Event::TaskQueued { task, attempt });
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
        let result = self.spawn_agent(gid, g, task, rank, attempt, phase);
        match result {
            Ok((pid, pidfd)) => {
                g.nodes[task][rank as usize].state = NodeState::Running { phase, pid, pidfd };
                self.dirty
                    .push((gid, node_row(g, task, rank, Some(pid), None)));
            }
            Err(e) => {
                append_log(
                    g,
                    task,
                    rank,
                    &format!("skyc: cannot start the node: {e}\n"),
                );
                g.nodes[task][rank as usize].state = NodeState::Done;
                g.inbox.push_back(Event::NodeExited {
                    task,
                    attempt,
                    node: rank,
                    phase,
                    code: 127,
                });
            }
        }
    }

    fn spawn_agent(
        &self,
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
        let cwd = match &g.plan.tasks[task].workdir {
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
        let script = paths::script(&g.dir, task, phase);
        let argv = g.net.wrap(
            net,
            vec![
                "bash".into(),
                "--noprofile".into(),
                "--norc".into(),
                script.display().to_string(),
            ],
        );
        let grant = g.grants[task].clone().unwrap_or_default();
        let mut env = node_env(&g.plan, gid, &g.net, &grant, task, rank, phase);
        env.push((NODE_MARKER_VAR.into(), adir.display().to_string()));
        let log = paths::log(&g.dir, &g.plan.tasks[task].name, rank);
        let launch = Launch {
            dir: &adir,
            log: &log,
            argv,
            env,
            cwd: &cwd,
        };
        agent::spawn(&agent::executable(&self.exe)?, launch)
    }

    fn on_agent_exit(&mut self, gid: i64, task: TaskId, rank: u32) {
        let Some(mut g) = self.groups.remove(&gid) else {
            return;
        };
        let node = &mut g.nodes[task][rank as usize];
        let NodeState::Running { phase, pid, .. } = node.state else {
            self.groups.insert(gid, g);
            return;
        };
        // Our own child until a supervisor restart; reap it.
        let _ = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG);
        let attempt = node.attempt;
        let adir = paths::attempt_dir(&paths::node_dir(&g.dir, task, rank), attempt, phase);
        let code = agent::read_exit(&adir);
        settle(&mut g, task, rank, phase, code, &adir);
        self.dirty
            .push((gid, node_row(&g, task, rank, None, code.map(i64::from))));
        self.barrier(gid, &mut g, task);
        self.release_if_done(&mut g, task);
        self.groups.insert(gid, g);
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

    fn flush_nodes(&mut self) -> io::Result<()> {
        if self.dirty.is_empty() {
            return Ok(());
        }
        let dirty = std::mem::take(&mut self.dirty);
        self.store
            .transaction(|tx| {
                for (gid, row) in &dirty {
                    tx.upsert_node(*gid, row)?;
                }
                Ok(())
            })
            .map_err(io::Error::other)
    }

    fn finish(&mut self, gid: i64) -> io::Result<()> {
        let Some(g) = self.groups.remove(&gid) else {
            return Ok(());
        };
        for grant in g.grants.iter().flatten() {
            self.allocator.release(grant);
        }
        self.flush_nodes()?;
        self.store
            .transaction(|tx| tx.finish_group(gid, now_ms()))
            .map_err(io::Error::other)?;
        network::teardown(&g.net);
        self.store
            .transaction(|tx| tx.clear_network(gid))
            .map_err(io::Error::other)?;
        log(format_args!(
            "group {gid} ({}): {}",
            g.plan.group,
            g.engine.group_status()
        ));
        Ok(())
    }

    /// Ends a group that cannot be started at all (its network, its plan):
    /// every task FAILED_SETUP, and the reason in every node's log.
    fn fail_group(&mut self, gid: i64, reason: &str) -> io::Result<()> {
        let dir = paths::group_dir(&self.dir, gid);
        let _ = fs::create_dir_all(dir.join("logs"));
        if let Ok(Ok(plan)) = self
            .store
            .plan(gid)
            .map(|p| serde_json::from_str::<Plan>(&p))
        {
            for (task, rank) in plan.nodes() {
                let log = paths::log(&dir, &plan.tasks[task].name, rank);
                let line = format!("skyc: the group cannot start: {reason}\n");
                let _ = logindex::append(&log, line.as_bytes());
            }
        }
        self.store
            .transaction(|tx| {
                tx.set_error(gid, reason)?;
                tx.end_unstarted(gid, crate::policy::Status::FailedSetup.as_str(), now_ms())
            })
            .map_err(io::Error::other)
    }

    /// Networks of groups that finished while a supervisor died between
    /// the record and the teardown.
    fn cleanup_finished_networks(&mut self) {
        let Ok(leftovers) = self.store.finished_with_network() else {
            return;
        };
        for (gid, json) in leftovers {
            if let Ok(net) = serde_json::from_str::<GroupNetwork>(&json) {
                network::teardown(&net);
            }
            let _ = self.store.transaction(|tx| tx.clear_network(gid));
        }
    }
}

/// What a node's ended agent left: `code` is the exit status it recorded,
/// `None` when the agent itself died (the node is lost). A setup that ended
/// well waits for the task's barrier; anything else goes to the engine.
fn settle(g: &mut GroupRun, task: TaskId, rank: u32, phase: Phase, code: Option<i32>, adir: &Path) {
    let attempt = g.nodes[task][rank as usize].attempt;
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
    g.inbox.extend(event);
}

fn first_phase(plan: &Plan, task: TaskId) -> Phase {
    if plan.tasks[task].setup.is_some() {
        Phase::Setup
    } else {
        Phase::Run
    }
}

fn node_row(g: &GroupRun, task: TaskId, rank: u32, pid: Option<Pid>, code: Option<i64>) -> NodeRow {
    let node = &g.nodes[task][rank as usize];
    let phase = match &node.state {
        NodeState::Running { phase, .. } => Some(*phase),
        _ => None,
    };
    NodeRow {
        task: task as i64,
        rank: i64::from(rank),
        hostname: g.plan.hostname(task, rank),
        ip: g
            .net
            .node(task, rank)
            .map(|n| n.ip.to_string())
            .unwrap_or_default(),
        pid: pid.map(|p| i64::from(p.as_raw_nonzero().get())),
        attempt: i64::from(node.attempt),
        phase: phase.map(|p| if p == Phase::Setup { "setup" } else { "run" }.to_owned()),
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

fn append_log(g: &GroupRun, task: TaskId, rank: u32, line: &str) {
    let log = paths::log(&g.dir, &g.plan.tasks[task].name, rank);
    let _ = logindex::append(&log, line.as_bytes());
}

fn write_scripts(dir: &Path, plan: &Plan) -> io::Result<()> {
    fs::create_dir_all(dir.join("scripts"))?;
    for (task, t) in plan.tasks.iter().enumerate() {
        for (phase, text) in [(Phase::Setup, &t.setup), (Phase::Run, &t.run)] {
            let text = text.as_deref().unwrap_or("");
            fs::write(paths::script(dir, task, phase), text)?;
        }
    }
    Ok(())
}

fn write_grant(dir: &Path, task: TaskId, attempt: Attempt, grant: &Grant) -> io::Result<()> {
    let tdir = paths::task_dir(dir, task);
    fs::create_dir_all(&tdir)?;
    let json = serde_json::to_string(grant).map_err(io::Error::other)?;
    agent::write_atomic(&tdir, &format!("grant-{attempt}.json"), &json)
}

fn read_grant(dir: &Path, task: TaskId, attempt: Attempt) -> Option<Grant> {
    let text = fs::read_to_string(paths::task_dir(dir, task).join(format!("grant-{attempt}.json")));
    serde_json::from_str(&text.ok()?).ok()
}

/// Kills what a lost node left running: every process that carries the
/// node's marker in its environment.
fn kill_orphans(adir: &Path) {
    let marker = format!("{NODE_MARKER_VAR}={}", adir.display());
    let Ok(entries) = fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
            .and_then(Pid::from_raw)
        else {
            continue;
        };
        let Ok(environ) = fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ
            .split(|&b| b == 0)
            .any(|var| var == marker.as_bytes())
        {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
    }
}

/// Asks the supervisor of `dir` to pick up what the caller wrote to the
/// store, starting one if none answers.
pub fn wake(dir: &Path) -> io::Result<()> {
    let socket = dir.join("supervisor.sock");
    let ask = || -> io::Result<()> {
        let mut stream = UnixStream::connect(&socket)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.write_all(b"wake\n")?;
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line)?;
        if line.trim() == "ok" {
            Ok(())
        } else {
            Err(io::Error::other("the supervisor did not answer"))
        }
    };
    if ask().is_ok() {
        return Ok(());
    }
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("supervisor.log"))?;
    let mut child = Command::new(std::env::current_exe()?)
        .arg("__supervise")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let mut last = None;
    for _ in 0..1000 {
        match ask() {
            Ok(()) => {
                // Reaped by a thread, so a long-running client leaves no
                // zombie when the supervisor exits first.
                std::thread::spawn(move || child.wait());
                return Ok(());
            }
            Err(e) => last = Some(e),
        }
        if let Ok(Some(status)) = child.try_wait() {
            if ask().is_ok() {
                return Ok(());
            }
            return Err(io::Error::other(format!(
                "the supervisor exited ({status}); see {}",
                dir.join("supervisor.log").display()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Err(last.unwrap_or_else(|| io::Error::other("the supervisor did not start")))
}

/// The engine's types as the store keeps them.
fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}
