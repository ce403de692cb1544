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
//! exclusively), so supervisors of different state directories never hand
//! out the same address.

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
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeNet {
    pub task: usize,
    pub rank: u32,
    pub ip: Ipv4Addr,
    pub offset: u32,
}

impl NodeNet {
    fn netns(&self) -> String {
        format!("skyc-{}", self.offset)
    }

    fn veth(&self) -> String {
        format!("skyh{}", self.offset)
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

/// Where address leases live: machine-wide, one directory per range.
fn lease_dir(range: &Range) -> PathBuf {
    let root = if is_root() {
        PathBuf::from("/run/skyc/leases")
    } else {
        std::env::temp_dir().join(format!(
            "skyc-leases-{}",
            rustix::process::geteuid().as_raw()
        ))
    };
    root.join(format!("{}-{}", Ipv4Addr::from(range.base), range.prefix))
}

/// A lock over the lease directory, held while leasing and while creating
/// the bridge.
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

/// Leases addresses and builds the group's network.
pub fn setup(
    plan: &Plan,
    mode: Mode,
    group_dir: &Path,
    owner: &str,
) -> Result<GroupNetwork, String> {
    let range = range_for(mode)?;
    let lease_dir = lease_dir(&range);
    let mut net = GroupNetwork {
        mode,
        range,
        nodes: Vec::new(),
        hosts_file: group_dir.join("hosts"),
        lease_dir: lease_dir.clone(),
    };
    {
        let _lock = lock(&lease_dir).map_err(|e| format!("{}: {e}", lease_dir.display()))?;
        let mut offsets = range.offsets();
        for (task, rank) in plan.nodes() {
            let offset = offsets
                .find(|&o| {
                    fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(lease_dir.join(range.addr(o).to_string()))
                        .and_then(|mut f| f.write_all(owner.as_bytes()))
                        .is_ok()
                })
                .ok_or_else(|| format!("no free address left in {}", describe_range(&range)));
            let offset = match offset {
                Ok(o) => o,
                Err(e) => {
                    release(&net);
                    return Err(e);
                }
            };
            net.nodes.push(NodeNet {
                task,
                rank,
                ip: range.addr(offset),
                offset,
            });
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

fn ensure_bridge(range: &Range) -> Result<(), String> {
    if Path::new("/sys/class/net").join(BRIDGE).exists() {
        return Ok(());
    }
    let cidr = format!("{}/{}", range.gateway(), range.prefix);
    ip(
        &["-batch", "-"],
        Some(&format!(
            "link add {BRIDGE} type bridge\naddr add {cidr} dev {BRIDGE}\nlink set {BRIDGE} up\n"
        )),
    )
}

fn build_namespaces(net: &GroupNetwork, hosts: &str) -> Result<(), String> {
    let mut batch = String::new();
    for node in &net.nodes {
        let (ns, veth) = (node.netns(), node.veth());
        // A namespace left by a crash between setup and lease release.
        if Path::new("/run/netns").join(&ns).exists() {
            let _ = ip(&["netns", "del", &ns], None);
        }
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

/// Removes the group's namespaces and gives its addresses back.
/// Idempotent: a supervisor that crashed half-way runs it again.
pub fn teardown(net: &GroupNetwork) {
    if net.mode == Mode::Netns {
        let mut batch = String::new();
        for node in &net.nodes {
            if Path::new("/run/netns").join(node.netns()).exists() {
                batch.push_str(&format!("netns del {}\n", node.netns()));
            }
        }
        if !batch.is_empty() {
            let _ = ip(&["-force", "-batch", "-"], Some(&batch));
        }
        for node in &net.nodes {
            let _ = fs::remove_dir_all(Path::new("/etc/netns").join(node.netns()));
        }
    }
    release(net);
}

fn release(net: &GroupNetwork) {
    for node in &net.nodes {
        let _ = fs::remove_file(net.lease_dir.join(node.ip.to_string()));
    }
}

impl GroupNetwork {
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
