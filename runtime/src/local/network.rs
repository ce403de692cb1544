//! Network identity of local nodes: each node gets an address of its own
//! and every node of the group resolves `{task}-{rank}.{group}` to it.
//!
//! - **Namespaces** (root): one network namespace per node, a veth pair
//!   to the bridge `skyc0`, an address from the configured range (default
//!   198.18.0.0/15, reserved for network testing), and a private hosts file
//!   that `ip netns exec` mounts over `/etc/hosts`. Two nodes can listen on
//!   the same port, as on a cluster.
//! - **Loopback** (fallback): a distinct 127.x address per node in the
//!   host's own network, and the hosts file mounted in a private mount
//!   namespace (a user namespace when not root). Servers must bind their
//!   own address (not 0.0.0.0) to share a port; nothing else is isolated.
//!
//! Addresses are leased machine-wide (a file per address, created
//! exclusively, whatever range it came from), so supervisors of different
//! state directories never hand out the same address. A node's namespace
//! and veth are named after its address, so the lease also owns the names:
//! whatever already bears them is a crash's leftover and is removed first.

use super::plan::{NetworkRequest, Plan};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const BRIDGE: &str = "skyc0";
const RESOLV_CONF: &str =
    "# skyc: nodes in network namespaces reach this machine and each other only\n";
const DEFAULT_NETNS_RANGE: &str = "198.18.0.0/15";
const DEFAULT_LOOPBACK_RANGE: &str = "127.18.0.0/16";

/// How hostnames reach a node's processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Netns,
    /// Loopback addresses; hosts file in a private mount namespace.
    LoopbackMount,
    /// Loopback addresses; hosts file in a user + mount namespace.
    LoopbackUserns,
    /// Loopback addresses, and no way to give a private hosts file.
    LoopbackNoHosts,
}

impl Mode {
    pub fn describe(self) -> &'static str {
        match self {
            Mode::Netns => "a network namespace per node",
            Mode::LoopbackMount | Mode::LoopbackUserns => {
                "a loopback address per node in the host's network (servers must bind their \
                 own address, not 0.0.0.0, to share a port)"
            }
            Mode::LoopbackNoHosts => {
                "a loopback address per node, and group hostnames do not resolve (no namespaces \
                 can be created here)"
            }
        }
    }
}

/// An IPv4 range in CIDR notation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    pub base: u32,
    pub prefix: u8,
}

impl Range {
    pub fn parse(s: &str) -> Result<Self, String> {
        let (addr, prefix) = s
            .split_once('/')
            .ok_or_else(|| format!("`{s}` is not an address range like 198.18.0.0/15"))?;
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| format!("`{addr}` is not an IPv4 address"))?;
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| (8..=28).contains(p))
            .ok_or_else(|| format!("`/{prefix}` must be a prefix length from 8 to 28"))?;
        let mask = u32::MAX << (32 - prefix);
        Ok(Self {
            base: u32::from(addr) & mask,
            prefix,
        })
    }

    /// The first address, kept for the bridge.
    fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.base + 1)
    }

    /// Offsets a node may take: after the gateway, before broadcast.
    fn offsets(&self) -> std::ops::Range<u32> {
        2..(1u32 << (32 - self.prefix)) - 1
    }

    fn addr(&self, offset: u32) -> Ipv4Addr {
        Ipv4Addr::from(self.base + offset)
    }
}

/// The group's network, recorded in the store so that it is torn down
/// even after a supervisor crash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupNetwork {
    pub mode: Mode,
    pub range: Range,
    /// Per node, in plan order (task, rank).
    pub nodes: Vec<NodeNet>,
    pub hosts_file: PathBuf,
    pub lease_dir: PathBuf,
    /// What this group's lease files hold; teardown touches only the
    /// names and leases that still hold it.
    #[serde(default)]
    pub owner: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeNet {
    pub task: usize,
    pub rank: u32,
    pub ip: Ipv4Addr,
}

impl NodeNet {
    /// `skyc-198.18.0.2`.
    fn netns(&self) -> String {
        format!("skyc-{}", self.ip)
    }

    /// The host end of the node's veth, `skyhc6120002`: the address in
    /// hex, as interface names are at most 15 bytes.
    fn veth(&self) -> String {
        format!("skyh{:08x}", u32::from(self.ip))
    }
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Picks the mode this machine allows for a request. Cheap (no process
/// is started when running as root): clients call it on every `run`.
pub fn resolve(request: NetworkRequest) -> Result<Mode, String> {
    let netns_ok = || is_root() && on_path("ip");
    match request {
        NetworkRequest::Netns if netns_ok() => Ok(Mode::Netns),
        NetworkRequest::Netns => {
            Err("network namespaces need root and iproute2's `ip`; use `--network loopback`".into())
        }
        NetworkRequest::Auto if netns_ok() => Ok(Mode::Netns),
        NetworkRequest::Auto | NetworkRequest::Loopback => Ok(loopback_mode()),
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .any(|dir| dir.join(program).is_file())
}

fn loopback_mode() -> Mode {
    let works = |args: &[&str]| {
        Command::new("unshare")
            .args(args)
            .args(["--", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if is_root() && on_path("unshare") {
        Mode::LoopbackMount
    } else if works(&["--user", "--map-root-user", "--mount"]) {
        Mode::LoopbackUserns
    } else {
        Mode::LoopbackNoHosts
    }
}

fn range_for(mode: Mode) -> Result<Range, String> {
    let (var, default) = if mode == Mode::Netns {
        ("SKYC_LOCAL_ADDRESSES", DEFAULT_NETNS_RANGE)
    } else {
        ("SKYC_LOCAL_LOOPBACK_ADDRESSES", DEFAULT_LOOPBACK_RANGE)
    };
    Range::parse(&std::env::var(var).unwrap_or_else(|_| default.to_owned()))
}

/// Where address leases live: one directory for the whole machine (per
/// user when not root), one file per address whatever its range, so
/// overlapping ranges never lease an address twice.
fn lease_dir() -> PathBuf {
    if is_root() {
        PathBuf::from("/run/skyc/addresses")
    } else {
        std::env::temp_dir().join(format!(
            "skyc-addresses-{}",
            rustix::process::geteuid().as_raw()
        ))
    }
}

/// A lock over the lease directory, held while leasing and while setting
/// up the bridge, which every supervisor of the machine shares.
struct DirLock(#[allow(dead_code)] fs::File);

fn lock(dir: &Path) -> std::io::Result<DirLock> {
    fs::create_dir_all(dir)?;
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(".lock"))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
    Ok(DirLock(file))
}

/// Leases addresses and builds the group's network. `group_dir` (which
/// exists) names the group in its leases.
pub fn setup(
    plan: &Plan,
    mode: Mode,
    group_dir: &Path,
    again: bool,
) -> Result<GroupNetwork, String> {
    let range = range_for(mode)?;
    let lease_dir = lease_dir();
    let owner = fs::canonicalize(group_dir)
        .map(|dir| format!("{}\n", dir.display()))
        .map_err(|e| format!("{}: {e}", group_dir.display()))?;
    let mut net = GroupNetwork {
        mode,
        range,
        nodes: Vec::new(),
        hosts_file: group_dir.join("hosts"),
        lease_dir: lease_dir.clone(),
        owner,
    };
    {
        let _lock = lock(&lease_dir).map_err(|e| format!("{}: {e}", lease_dir.display()))?;
        // Only a group that leased before (its supervisor killed before it
        // recorded the network) can hold leases to give back: looking
        // for them reads every lease of the machine. Its marker says so;
        // a group an older skyc adopted has none, but is adopted again.
        let leasing = group_dir.join(LEASING);
        if leasing.exists() || again {
            release_unrecorded(&lease_dir, &net.owner);
        }
        if !leasing.exists() {
            fs::write(&leasing, "").map_err(|e| format!("{}: {e}", leasing.display()))?;
        }
        let hint = lease_dir.join(format!(
            ".next-{}",
            describe_range(&range).replace('/', "-")
        ));
        let mut offsets = next_fit(&range, &hint);
        let mut last = None;
        for (task, rank) in plan.nodes() {
            let offset = offsets
                .find(|&o| take_lease(&lease_dir.join(range.addr(o).to_string()), &net.owner))
                .ok_or_else(|| format!("no free address left in {}", describe_range(&range)));
            let offset = match offset {
                Ok(o) => o,
                Err(e) => {
                    release(&net);
                    return Err(e);
                }
            };
            last = Some(offset);
            net.nodes.push(NodeNet {
                task,
                rank,
                ip: range.addr(offset),
            });
        }
        if let Some(last) = last {
            let _ = fs::write(&hint, (last + 1).to_string());
        }
        if mode == Mode::Netns
            && let Err(e) = ensure_bridge(&range)
        {
            release(&net);
            return Err(e);
        }
    }
    let hosts = hosts_file(plan, &net);
    let result = fs::write(&net.hosts_file, &hosts)
        .map_err(|e| format!("{}: {e}", net.hosts_file.display()))
        .and_then(|()| {
            if mode == Mode::Netns {
                build_namespaces(&net, &hosts)
            } else {
                Ok(())
            }
        });
    if let Err(e) = result {
        teardown(&net);
        return Err(e);
    }
    Ok(net)
}

/// Written in a group's directory before its first lease: a group that
/// sets up its network again (its supervisor killed before it recorded
/// the network) looks for leases of its own to give back.
const LEASING: &str = ".leasing";

/// The range's offsets from where the last lease ended (`hint`), around
/// to where it began: a search from the range's start would step over
/// every address held, so a lease would cost more the more nodes run.
fn next_fit(range: &Range, hint: &Path) -> impl Iterator<Item = u32> + use<> {
    let all = range.offsets();
    let start = fs::read_to_string(hint)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .filter(|o| all.contains(o))
        .unwrap_or(all.start);
    (start..all.end).chain(all.start..start)
}

/// Takes the lease at `path` for `owner` if it is free or stale: its group
/// directory is gone (a supervisor killed, then its state directory
/// removed) or it is empty (a supervisor killed while writing it; writers
/// hold the lock, so none is half-way now). Called under the lease lock.
fn take_lease(path: &Path, owner: &str) -> bool {
    match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(mut file) => {
            let written = file.write_all(owner.as_bytes()).is_ok();
            if !written {
                let _ = fs::remove_file(path);
            }
            written
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let stale = fs::read_to_string(path).is_ok_and(|held| {
                let group_dir = Path::new(held.lines().next().unwrap_or(""));
                held.is_empty() || (group_dir.is_absolute() && !group_dir.exists())
            });
            stale && fs::write(path, owner).is_ok()
        }
        Err(_) => false,
    }
}

/// Gives back the leases a supervisor of this same group took before it
/// was killed, before it recorded the network. Their names are removed by
/// whichever group leases the addresses next.
fn release_unrecorded(lease_dir: &Path, owner: &str) {
    for entry in fs::read_dir(lease_dir).into_iter().flatten().flatten() {
        if entry.file_name() != ".lock"
            && fs::read_to_string(entry.path()).is_ok_and(|held| held == owner)
        {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Whether `net` still holds the lease of `node`'s address.
fn holds(net: &GroupNetwork, node: &NodeNet) -> bool {
    fs::read_to_string(net.lease_dir.join(node.ip.to_string())).is_ok_and(|held| held == net.owner)
}

fn describe_range(range: &Range) -> String {
    format!("{}/{}", Ipv4Addr::from(range.base), range.prefix)
}

/// The hosts file every node of the group sees.
fn hosts_file(plan: &Plan, net: &GroupNetwork) -> String {
    let mut out = String::from("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
    if plan.hostnames {
        for node in &net.nodes {
            out.push_str(&format!(
                "{}\t{}\n",
                node.ip,
                plan.hostname(node.task, node.rank)
            ));
        }
    }
    out
}

fn ip(args: &[&str], batch: Option<&str>) -> Result<(), String> {
    let mut cmd = Command::new("ip");
    cmd.args(args)
        .stdin(if batch.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("ip: {e}"))?;
    if let (Some(batch), Some(mut stdin)) = (batch, child.stdin.take()) {
        let _ = stdin.write_all(batch.as_bytes());
    }
    let out = child.wait_with_output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// Makes the bridge exist, be up and carry the range's gateway, whatever a
/// supervisor killed half-way left: each step is a no-op when already
/// done. Called under the lease lock.
fn ensure_bridge(range: &Range) -> Result<(), String> {
    if !link_exists(BRIDGE)
        && let Err(e) = ip(&["link", "add", BRIDGE, "type", "bridge"], None)
        && !link_exists(BRIDGE)
    {
        return Err(e);
    }
    let cidr = format!("{}/{}", range.gateway(), range.prefix);
    ip(
        &["-batch", "-"],
        Some(&format!(
            "addr replace {cidr} dev {BRIDGE}\nlink set {BRIDGE} up\n"
        )),
    )
}

/// Deletes the namespaces and host veths of `nodes` that exist, and waits
/// (a bounded while) until their names are free. The veth goes first and
/// by name: deleting it frees both ends at once, whereas a deleted
/// namespace lets go of its devices later, in the kernel's own time, and a
/// lingering `skyh…` would make the next `link add` of that name fail.
fn remove_names(nodes: &[&NodeNet]) -> Result<(), String> {
    const TRIES: u32 = 100;
    for attempt in 0..=TRIES {
        let mut batch = String::new();
        for node in nodes {
            if link_exists(&node.veth()) {
                batch.push_str(&format!("link del {}\n", node.veth()));
            }
            if netns_exists(&node.netns()) {
                batch.push_str(&format!("netns del {}\n", node.netns()));
            }
        }
        if batch.is_empty() {
            break;
        }
        if attempt == TRIES {
            return Err(format!(
                "could not remove what a previous group left behind: {}",
                batch.trim().replace('\n', "; ")
            ));
        }
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // Each name is checked again above: the errors say nothing more.
        let _ = ip(&["-force", "-batch", "-"], Some(&batch));
    }
    Ok(())
}

fn build_namespaces(net: &GroupNetwork, hosts: &str) -> Result<(), String> {
    // This group holds the leases, so whatever bears its names is a
    // leftover of a killed supervisor.
    remove_names(&net.nodes.iter().collect::<Vec<_>>())?;
    let mut batch = String::new();
    for node in &net.nodes {
        let (ns, veth) = (node.netns(), node.veth());
        let etc = Path::new("/etc/netns").join(&ns);
        fs::create_dir_all(&etc).map_err(|e| format!("{}: {e}", etc.display()))?;
        fs::write(etc.join("hosts"), hosts).map_err(|e| format!("{}: {e}", etc.display()))?;
        // No DNS server is reachable from the namespace (there is no route
        // beyond this machine); with none listed, lookups the hosts file
        // does not answer fail at once instead of timing out.
        fs::write(etc.join("resolv.conf"), RESOLV_CONF)
            .map_err(|e| format!("{}: {e}", etc.display()))?;
        batch.push_str(&format!(
            "netns add {ns}\nlink add {veth} type veth peer name eth0 netns {ns}\n\
             link set {veth} master {BRIDGE}\nlink set {veth} up\n"
        ));
    }
    ip(&["-batch", "-"], Some(&batch))?;
    // The inside of each namespace, configured by one `ip` per namespace,
    // all at once.
    let gateway = net.range.gateway();
    let jobs: Vec<_> = net
        .nodes
        .iter()
        .map(|node| {
            let ns = node.netns();
            let batch = format!(
                "link set lo up\naddr add {}/{} dev eth0\nlink set eth0 up\n\
                 route add default via {gateway}\n",
                node.ip, net.range.prefix
            );
            std::thread::spawn(move || ip(&["-n", &ns, "-batch", "-"], Some(&batch)))
        })
        .collect();
    for job in jobs {
        job.join()
            .unwrap_or_else(|_| Err("ip: a configuration thread panicked".into()))?;
    }
    Ok(())
}

/// Removes the group's namespaces and gives its addresses back; an
/// address is given back only once its names are free (else it stays
/// leased, so no group trips on them). Idempotent, and only what the group
/// still holds is touched: a supervisor killed half-way runs it again after
/// other groups may have leased the addresses it had given back.
pub fn teardown(net: &GroupNetwork) {
    let held: Vec<&NodeNet> = net.nodes.iter().filter(|n| holds(net, n)).collect();
    if net.mode == Mode::Netns {
        let _ = remove_names(&held);
        for node in &held {
            let _ = fs::remove_dir_all(Path::new("/etc/netns").join(node.netns()));
        }
    }
    for node in held {
        if net.mode != Mode::Netns || !(link_exists(&node.veth()) || netns_exists(&node.netns())) {
            let _ = fs::remove_file(net.lease_dir.join(node.ip.to_string()));
        }
    }
}

/// Gives back the leases taken so far, before any name was made.
fn release(net: &GroupNetwork) {
    for node in net.nodes.iter().filter(|n| holds(net, n)) {
        let _ = fs::remove_file(net.lease_dir.join(node.ip.to_string()));
    }
}

impl GroupNetwork {
    /// A pool job's: it has no address of its own, its nodes run with
    /// their worker's network identity.
    pub fn borrowed(group_dir: &Path) -> Self {
        Self {
            mode: Mode::LoopbackNoHosts,
            range: Range {
                base: 0,
                prefix: 32,
            },
            nodes: Vec::new(),
            hosts_file: group_dir.join("hosts"),
            lease_dir: lease_dir(),
            owner: String::new(),
        }
    }

    pub fn node(&self, task: usize, rank: u32) -> Option<&NodeNet> {
        self.nodes.iter().find(|n| n.task == task && n.rank == rank)
    }

    /// The task's node addresses, in rank order.
    pub fn task_ips(&self, task: usize) -> Vec<Ipv4Addr> {
        self.nodes
            .iter()
            .filter(|n| n.task == task)
            .map(|n| n.ip)
            .collect()
    }

    /// `argv`, run with the node's network identity.
    pub fn wrap(&self, node: &NodeNet, argv: Vec<String>) -> Vec<String> {
        const BIND_HOSTS: &str = "mount --bind \"$0\" /etc/hosts && exec \"$@\"";
        let hosts = self.hosts_file.display().to_string();
        let prefix: Vec<String> = match self.mode {
            Mode::Netns => vec!["ip".into(), "netns".into(), "exec".into(), node.netns()],
            Mode::LoopbackMount => ["unshare", "--mount", "--", "sh", "-c", BIND_HOSTS]
                .into_iter()
                .map(String::from)
                .chain([hosts])
                .collect(),
            Mode::LoopbackUserns => [
                "unshare",
                "--user",
                "--map-root-user",
                "--mount",
                "--",
                "sh",
                "-c",
                BIND_HOSTS,
            ]
            .into_iter()
            .map(String::from)
            .chain([hosts])
            .collect(),
            Mode::LoopbackNoHosts => Vec::new(),
        };
        prefix.into_iter().chain(argv).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        let r = Range::parse("198.18.0.0/15").expect("valid");
        assert_eq!(r.gateway(), Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(r.addr(2), Ipv4Addr::new(198, 18, 0, 2));
        assert_eq!(r.offsets().end, 131_071);
        assert_eq!(
            r.addr(r.offsets().end - 1),
            Ipv4Addr::new(198, 19, 255, 254)
        );
        assert_eq!(Range::parse("10.1.2.3/24").map(|r| r.base), Ok(0x0a01_0200));
        assert!(Range::parse("10.0.0.0").is_err());
        assert!(Range::parse("10.0.0.0/31").is_err());
        assert!(Range::parse("300.0.0.0/16").is_err());
    }
}
