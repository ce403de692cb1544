//! End-to-end tests of the local target's network namespaces: groups that
//! reuse addresses at once, many supervisors leasing at once, and what a
//! crash leaves behind. They need root (namespaces, veths); without it
//! they say so and pass.
//!
//! Each test leases from a range of its own (`SKYC_LOCAL_ADDRESSES`, at
//! the top of the default block), so that it knows which names its nodes
//! get and the leftovers it makes are in no other test's way.

use crate::support::scratch::{Scratch, node_processes, text};
use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn skip() -> bool {
    let skip = !is_root();
    if skip {
        eprintln!("SKIPPED: network namespaces need root");
    }
    skip
}

/// `nodes` nodes: the last answers one HTTP request, rank 0 asks it by
/// group hostname (the others end at once), so a group succeeds only if
/// both namespaces are set up and reachable.
fn group(name: &str, nodes: u32) -> String {
    let last = nodes - 1;
    format!(
        r#"name: {name}
execution: parallel
---
name: node
num_nodes: {nodes}
run: |
  if [ "$SKYPILOT_NODE_RANK" = {last} ]; then
    exec python3 -c '
  import http.server
  class H(http.server.BaseHTTPRequestHandler):
      def do_GET(self):
          self.send_response(200); self.end_headers(); self.wfile.write(b"pong")
      def log_message(self, *a): pass
  s = http.server.HTTPServer(("0.0.0.0", 8080), H)
  s.timeout = 20
  s.handle_request()
  '
  elif [ "$SKYPILOT_NODE_RANK" != 0 ]; then
    exit 0
  fi
  exec python3 -c '
  import time, urllib.request
  url = "http://node-{last}.{name}:8080/"
  for _ in range(200):
      try:
          print(urllib.request.urlopen(url, timeout=2).read().decode(), "from", url)
          break
      except OSError:
          time.sleep(0.05)
  else:
      raise SystemExit(f"no answer from {{url}}")
  '
"#
    )
}

/// `skyc run` of `file` in namespaces, leasing from `range`.
fn run_netns(s: &Scratch, file: &str, range: &str) -> Output {
    s.skyc(&["run", file, "--network", "netns"])
        .env("SKYC_LOCAL_ADDRESSES", range)
        .output()
        .expect("skyc run")
}

fn assert_ran(out: &Output, what: &str) {
    let stdout = text(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("pong from"),
        "{what}:\n{stdout}\n{}",
        text(&out.stderr)
    );
}

/// A node's namespace and the host end of its veth, as docs/targets/local.md names
/// them: `skyc-<address>` and `skyh<address in hex>`.
fn names(ip: Ipv4Addr) -> (String, String) {
    (format!("skyc-{ip}"), format!("skyh{:08x}", u32::from(ip)))
}

/// `ip` with `args` split at spaces (no name here has one).
fn ip(args: &str) -> bool {
    Command::new("ip")
        .args(args.split(' '))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// The node addresses of a /28 (13: .2 to .14), and the range itself.
fn slash28(base: Ipv4Addr) -> (Vec<Ipv4Addr>, String) {
    let addrs = (2..15).map(|o| Ipv4Addr::from(u32::from(base) + o));
    (addrs.collect(), format!("{base}/28"))
}

/// No lease, namespace or veth is left for any of `addrs` once the
/// supervisor, which tears a group down after recording its end, has given
/// the leases back (names go first).
fn assert_all_gone(addrs: &[Ipv4Addr]) {
    let leases: Vec<_> = addrs
        .iter()
        .map(|a| Path::new("/run/skyc/addresses").join(a.to_string()))
        .collect();
    let start = Instant::now();
    while let Some(lease) = leases.iter().find(|l| l.exists()) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{} is left",
            lease.display()
        );
        thread::sleep(Duration::from_millis(50));
    }
    for &addr in addrs {
        let (ns, veth) = names(addr);
        assert!(!netns_exists(&ns), "{ns} is left");
        assert!(!link_exists(&veth), "{veth} is left");
    }
}

#[test]
fn back_to_back_groups_reuse_addresses() {
    if skip() {
        return;
    }
    let s = Scratch::new("net-serial");
    s.write("g.yaml", &group("serial", 2));
    // Every group gets the addresses the one before it just gave back.
    for i in 0..20 {
        let out = run_netns(&s, "g.yaml", "198.19.254.0/28");
        assert_ran(&out, &format!("group {i}"));
    }
}

#[test]
fn concurrent_groups_from_many_state_dirs() {
    if skip() {
        return;
    }
    let dirs: Vec<Scratch> = (0..10)
        .map(|i| {
            let s = Scratch::new(&format!("net-many-{i}"));
            s.write("g.yaml", &group("many", 2));
            s
        })
        .collect();
    thread::scope(|scope| {
        let runs: Vec<_> = dirs
            .iter()
            .map(|s| scope.spawn(|| run_netns(s, "g.yaml", "198.19.253.0/24")))
            .collect();
        for (i, run) in runs.into_iter().enumerate() {
            assert_ran(&run.join().expect("run thread"), &format!("state dir {i}"));
        }
    });
}

#[test]
fn leftover_namespaces_and_veths_are_removed() {
    if skip() {
        return;
    }
    let (addrs, range) = slash28(Ipv4Addr::new(198, 19, 252, 0));
    // What a supervisor killed in its teardown, after its namespaces but
    // not its veths were deleted, or before anything was, leaves behind
    // once its leases are gone: every name the next group will get.
    for (i, &addr) in addrs.iter().enumerate() {
        let (ns, veth) = names(addr);
        // Whatever a failed run of this test left.
        ip(&format!("link del {veth}"));
        ip(&format!("netns del {ns}"));
        let made = if i % 2 == 0 {
            ip(&format!("netns add {ns}"))
                && ip(&format!(
                    "link add {veth} type veth peer name eth0 netns {ns}"
                ))
        } else {
            ip(&format!("link add {veth} type veth peer name {veth}p"))
        };
        assert!(made, "leftovers of {addr}");
    }
    let s = Scratch::new("net-leftovers");
    s.write("g.yaml", &group("leftovers", 13));
    let out = run_netns(&s, "g.yaml", &range);
    assert_ran(&out, "a group over leftovers");
    assert_all_gone(&addrs);
}

#[test]
fn a_killed_supervisors_addresses_are_reclaimed() {
    if skip() {
        return;
    }
    let (addrs, range) = slash28(Ipv4Addr::new(198, 19, 251, 0));
    // A group holding every address of the range, its supervisor killed
    // and its state directory removed.
    let dead = Scratch::new("net-killed");
    dead.write(
        "g.yaml",
        "name: killed\nexecution: parallel\n---\nname: node\nnum_nodes: 13\nrun: exec sleep 600\n",
    );
    let out = dead
        .skyc(&["run", "g.yaml", "--network", "netns", "-d"])
        .env("SKYC_LOCAL_ADDRESSES", &range)
        .output()
        .expect("skyc run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id: i64 = text(&out.stdout).trim().parse().expect("group id");
    let status = dead.wait_for(id, Duration::from_secs(30), |s| {
        s["tasks"][0]["nodes"]
            .as_array()
            .is_some_and(|n| n.len() == 13 && n.iter().all(|n| n["phase"] == "run"))
    });
    let supervisor = status["supervisor_pid"].as_i64().expect("supervisor pid");
    let kill = |pid: i64| {
        Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
    };
    let _ = kill(supervisor);
    // Its nodes too, so that nothing of the test outlives it.
    let start = Instant::now();
    loop {
        let nodes = node_processes(&dead.state());
        if nodes.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nodes live on: {nodes:?}"
        );
        for pid in nodes {
            let _ = kill(pid.into());
        }
        thread::sleep(Duration::from_millis(50));
    }
    for &addr in &addrs {
        assert!(
            netns_exists(&names(addr).0),
            "the killed group's namespaces are there"
        );
    }
    std::fs::remove_dir_all(dead.state()).expect("remove the state directory");
    // A group needing every address of the range starts all the same.
    let s = Scratch::new("net-after-kill");
    s.write("g.yaml", &group("after", 13));
    let out = run_netns(&s, "g.yaml", &range);
    assert_ran(&out, "a group after a killed supervisor");
    assert_all_gone(&addrs);
}
