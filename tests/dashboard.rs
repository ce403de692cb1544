//! `skyc dashboard` over real groups on the local target: its HTTP side
//! (the token, the JSON views, log offsets, the cancel button), state
//! directories it did not make, and the page itself in headless Chromium
//! (what is on it while a group runs and after a restart; screenshots
//! under `target/dashboard-screenshots/` to look at).
//!
//! Chromium is required: without it these tests fail saying how to
//! install it, unless `SKYC_CHROMIUM=skip` (then the browser test skips,
//! loudly). `scripts/test` installs it (as root).

use crate::support::scratch::{Scratch, task, text};
use crate::support::{root, snapshots};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A trainer whose node 1 fails its first attempt (a restart on error),
/// then runs until cancelled; an auxiliary beside it. Logs carry markup,
/// which the page must show as text.
fn group(name: &str) -> String {
    format!(
        r#"name: {name}
execution: parallel
primary_tasks: [trainer]
---
name: trainer
num_nodes: 2
resources:
  job_recovery:
    max_restarts_on_errors: 1
run: |
  f="$SCRATCH/attempts-$SKYPILOT_NODE_RANK"
  n=$(cat "$f" 2>/dev/null || echo 0)
  echo $((n + 1)) > "$f"
  echo "trainer $SKYPILOT_NODE_RANK attempt $n <b>bold</b><img src=x>"
  if [ "$n" = 0 ] && [ "$SKYPILOT_NODE_RANK" = 1 ]; then exit 1; fi
  exec sleep 300
---
name: buffer
run: exec sleep 300
"#
    )
}

/// A `skyc dashboard` of ours, stopped on drop.
pub(crate) struct Dashboard {
    child: Child,
    url: String,
    pub(crate) addr: String,
    pub(crate) token: String,
}

impl Dashboard {
    fn start(state: &Path) -> Self {
        let mut cmd = crate::support::skyc();
        cmd.args(["dashboard", "--port", "0", "--state-dir"])
            .arg(state);
        Self::spawned(cmd)
    }

    /// The dashboard `cmd` (`skyc dashboard ...`) serves.
    pub(crate) fn spawned(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("skyc dashboard");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the URL");
        let url = line.trim().to_owned();
        let rest = url.strip_prefix("http://").expect("an http URL");
        let (addr, query) = rest.split_once('/').expect("a path");
        assert!(addr.starts_with("127.0.0.1:"), "loopback only: {url}");
        let token = query.strip_prefix("?token=").expect("a token").to_owned();
        assert_eq!(token.len(), 64, "32 random bytes: {token}");
        let addr = addr.to_owned();
        Self {
            child,
            url,
            addr,
            token,
        }
    }

    /// A request; (status, headers lowercased, body).
    pub(crate) fn request(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut stream = TcpStream::connect(&self.addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: 0\r\n",
            self.addr
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        stream.write_all(req.as_bytes()).unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).unwrap();
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a header");
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let mut lines = head.lines();
        let status: u16 = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .expect("a status");
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Reply {
            status,
            headers,
            body: raw[split + 4..].to_vec(),
        }
    }

    pub(crate) fn get(&self, path: &str) -> Reply {
        self.request("GET", path, &[("X-Skyc-Token", &self.token.clone())])
    }

    pub(crate) fn json(&self, path: &str) -> Value {
        let r = self.get(path);
        assert_eq!(r.status, 200, "{path}: {}", text(&r.body));
        serde_json::from_slice(&r.body).expect("JSON")
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> u64 {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or_else(|| panic!("no header {name}"))
    }
}

/// Waits until node 1 of the trainer failed once and the task runs again.
fn wait_restarted(s: &Scratch, id: i64) -> Value {
    s.wait_for(id, Duration::from_secs(60), |st| {
        let t = task(st, "trainer");
        t["restarts"] == 1 && t["status"] == "RUNNING" && task(st, "buffer")["status"] == "RUNNING"
    })
}

#[test]
fn the_api_needs_the_token_serves_the_store_and_cancels_as_skyc_cancel_does() {
    let s = Scratch::new("dash-http");
    s.write("g.yaml", &group("dash-http"));
    let id = s.detach("g.yaml");
    wait_restarted(&s, id);
    let d = Dashboard::start(&s.state());

    // Refused without the token, with a wrong one, and with no data.
    for path in ["/", "/api/groups", &format!("/api/groups/{id}")] {
        let none = d.request("GET", path, &[]);
        assert_eq!(none.status, 401, "{path}");
        let wrong = d.request("GET", &format!("{path}?token={}", "0".repeat(64)), &[]);
        assert_eq!(wrong.status, 403, "{path}");
        let short = d.request("GET", path, &[("X-Skyc-Token", "abc")]);
        assert_eq!(short.status, 403, "{path}");
        for r in [none, wrong, short] {
            assert!(!text(&r.body).contains("dash-http"), "{path}: no data");
        }
    }
    // The URL printed opens the page; the page inlines the list.
    let page = d.request("GET", &format!("/?token={}", d.token), &[]);
    assert_eq!(page.status, 200);
    let html = text(&page.body);
    assert!(html.contains("\"name\":\"dash-http\""), "{html}");
    assert!(
        page.headers
            .iter()
            .any(|(k, v)| k == "content-security-policy" && v.contains("script-src 'nonce-")),
        "{:?}",
        page.headers
    );

    // The list and a group, as `skyc status` reads them.
    let list = d.json("/api/groups");
    assert_eq!(list["total"], 1);
    let g = &list["groups"][0];
    assert_eq!(
        (g["id"].as_i64(), &g["name"]),
        (Some(id), &Value::from("dash-http"))
    );
    assert_eq!(g["status"], "RUNNING");
    assert_eq!(g["recoveries"], 1);
    assert_eq!(g["nodes"], 3);
    let one = d.json(&format!("/api/groups/{id}"));
    let status = s.status(id);
    assert_eq!(one["group"]["tasks"][0]["name"], status["tasks"][0]["name"]);
    let nodes = &one["group"]["tasks"][0]["nodes"];
    assert_eq!(nodes[1]["hostname"], "trainer-1.dash-http");
    assert!(!nodes[1]["ip"].as_str().unwrap_or("").is_empty(), "{nodes}");
    assert_eq!(nodes[1]["attempt"], 1);
    let spans = one["timeline"].as_array().expect("a timeline");
    let failed = spans
        .iter()
        .find(|s| s["task"] == 0 && s["node"] == 1 && s["attempt"] == 0)
        .expect("node 1's first attempt");
    assert_eq!(failed["outcome"], "failed", "{failed}");
    assert_eq!(failed["code"], 1);
    assert_eq!(failed["restarted"], true);
    let second = spans
        .iter()
        .find(|s| s["task"] == 0 && s["node"] == 1 && s["attempt"] == 1)
        .expect("node 1's second attempt");
    assert_eq!(second["outcome"], "running", "{second}");
    assert_eq!(d.get("/api/groups/999").status, 404);
    assert_eq!(d.get("/api/nothing").status, 404);
    assert_eq!(d.json("/api/pools")["pools"], Value::Array(vec![]));

    // Logs by offset: bounded chunks that join up, the tail, out of range.
    let log = format!("/api/groups/{id}/log?task=0&rank=1");
    let all = d.get(&format!("{log}&offset=0"));
    assert_eq!(all.status, 200);
    let body = text(&all.body);
    assert!(body.contains("trainer 1 attempt 0 <b>bold</b>"), "{body}");
    assert!(body.contains("trainer 1 attempt 1"), "{body}");
    assert_eq!(all.header("x-skyc-start"), 0);
    assert_eq!(all.header("x-skyc-next"), all.body.len() as u64);
    assert_eq!(all.header("x-skyc-size"), all.body.len() as u64);
    let from = 8;
    let rest = d.get(&format!("{log}&offset={from}"));
    assert_eq!(rest.body, all.body[from..]);
    let past = d.get(&format!("{log}&offset=999999"));
    assert!(past.body.is_empty());
    let tail = d.get(&log);
    assert_eq!(tail.body, all.body, "a short log's tail is all of it");
    assert_eq!(
        d.get(&format!("/api/groups/{id}/log?task=5&rank=0")).status,
        404
    );
    assert_eq!(
        d.get(&format!("/api/groups/{id}/log?task=0&rank=2")).status,
        404
    );
    assert_eq!(d.get(&format!("/api/groups/{id}/log?task=x")).status, 400);

    // Cancel: POST only, the token in a header, from the page's origin.
    let cancel = format!("/api/groups/{id}/cancel");
    assert_eq!(d.get(&cancel).status, 405);
    let in_query = d.request("POST", &format!("{cancel}?token={}", d.token), &[]);
    assert_eq!(in_query.status, 401, "a POST needs the header");
    let foreign = d.request(
        "POST",
        &cancel,
        &[
            ("X-Skyc-Token", &d.token),
            ("Origin", "http://evil.example"),
        ],
    );
    assert_eq!(foreign.status, 403);
    assert!(
        s.status(id)["finished_at_ms"].is_null(),
        "nothing cancelled yet"
    );
    let origin = format!("http://{}", d.addr);
    let ok = d.request(
        "POST",
        &cancel,
        &[("X-Skyc-Token", &d.token), ("Origin", &origin)],
    );
    assert_eq!(ok.status, 202, "{}", text(&ok.body));
    let done = s.wait_finished(id);
    assert_eq!(done["status"], "CANCELLED");
    let again = d.request("POST", &cancel, &[("X-Skyc-Token", &d.token)]);
    assert_eq!(again.status, 409, "{}", text(&again.body));
    let after = d.json(&format!("/api/groups/{id}"));
    assert!(
        after["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["outcome"] == "cancelled"),
        "{:#}",
        after["timeline"]
    );
}

#[test]
fn state_directories_it_did_not_make_give_an_empty_page_or_a_clear_error() {
    let s = Scratch::new("dash-dirs");
    // Missing: an empty page, and nothing created.
    let missing = s.dir.join("never");
    {
        let d = Dashboard::start(&missing);
        let list = d.json("/api/groups");
        assert_eq!(list["groups"], Value::Array(vec![]));
        assert!(list["note"].as_str().is_some(), "{list}");
        assert_eq!(d.json("/api/pools")["pools"], Value::Array(vec![]));
        assert_eq!(d.get("/api/groups/1").status, 404);
        let page = d.request("GET", &format!("/?token={}", d.token), &[]);
        assert_eq!(page.status, 200);
        assert_eq!(
            d.request(
                "POST",
                "/api/groups/1/cancel",
                &[("X-Skyc-Token", &d.token)]
            )
            .status,
            404
        );
    }
    assert!(!missing.exists(), "the dashboard creates nothing");

    // Not a database, an older schema: said at once, exit 2, no panic.
    let corrupt = s.dir.join("corrupt");
    std::fs::create_dir_all(&corrupt).unwrap();
    std::fs::write(
        corrupt.join("state.db"),
        "not SQLite at all, a text file".repeat(100),
    )
    .unwrap();
    let old = s.dir.join("old");
    std::fs::create_dir_all(&old).unwrap();
    {
        let conn = rusqlite::Connection::open(old.join("state.db")).unwrap();
        conn.execute_batch(
            "CREATE TABLE groups (id INTEGER PRIMARY KEY, name TEXT); PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let before = std::fs::read(old.join("state.db")).unwrap();
    let mut transcript = String::new();
    for dir in [&corrupt, &old] {
        let out = crate::support::skyc()
            .args(["dashboard", "--port", "0", "--state-dir"])
            .arg(dir)
            .output()
            .expect("skyc dashboard");
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(out.stdout.is_empty(), "no URL: {}", text(&out.stdout));
        transcript.push_str(&text(&out.stderr).replace(&s.dir.display().to_string(), "[dir]"));
    }
    assert_eq!(
        std::fs::read(old.join("state.db")).unwrap(),
        before,
        "not migrated"
    );
    snapshots("cli").bind(|| insta::assert_snapshot!("dashboard_unreadable_state", transcript));
}

/// Chromium, or `None` when `SKYC_CHROMIUM=skip` says to go without.
fn chromium() -> Option<PathBuf> {
    if std::env::var("SKYC_CHROMIUM").is_ok_and(|v| v == "skip") {
        eprintln!("SKIPPED: SKYC_CHROMIUM=skip: the dashboard is not tested in a browser");
        return None;
    }
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if let Some(path) = std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .find(|f| f.is_file())
        }) {
            return Some(path);
        }
    }
    panic!(
        "the dashboard's browser tests need headless Chromium: `apt-get install chromium` \
         (Debian), or set SKYC_CHROMIUM=skip to leave them out"
    );
}

/// Chromium's DOM of `url` after it ran for a while (virtual time).
fn dump_dom(chromium: &Path, url: &str) -> String {
    let out = Command::new(chromium)
        .args(headless())
        .args(["--virtual-time-budget=5000", "--dump-dom", url])
        .output()
        .expect("chromium");
    assert!(out.status.success(), "chromium: {}", text(&out.stderr));
    text(&out.stdout)
}

fn screenshot(chromium: &Path, url: &str, file: &Path, size: &str) {
    let _ = std::fs::remove_file(file);
    let out = Command::new(chromium)
        .args(headless())
        .arg("--virtual-time-budget=5000")
        .arg(format!("--window-size={size}"))
        .arg(format!("--screenshot={}", file.display()))
        .arg(url)
        .output()
        .expect("chromium");
    let png = std::fs::read(file).unwrap_or_default();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "no screenshot of {url}: {}",
        text(&out.stderr)
    );
}

fn headless() -> [&'static str; 5] {
    [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
    ]
}

/// A pool of one worker, with one job on it and one waiting.
const POOL: &str =
    "name: dash-pool\npool:\n  workers: 1\nresources:\n  cpus: 2\nsetup: echo ready\n";
const JOB: &str = "name: infer\nresources:\n  cpus: 2\nrun: exec sleep 300\n";

#[test]
fn the_page_in_chromium_shows_groups_pools_nodes_and_the_restart() {
    let Some(chromium) = chromium() else {
        return;
    };
    let shots = root().join("target/dashboard-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let s = Scratch::new("dash-browser");
    s.write("g.yaml", &group("dash-browser"));
    s.write("pool.yaml", POOL);
    s.write("job.yaml", JOB);
    let machine = |c: &mut Command| {
        c.env("SKYC_LOCAL_CPUS", "8")
            .env("SKYC_LOCAL_MEMORY_GB", "32")
            .env("SKYC_LOCAL_GPUS", "0");
    };
    let mut apply = s.skyc(&[
        "pool",
        "apply",
        "-p",
        "dash-pool",
        "pool.yaml",
        "--network",
        "loopback",
    ]);
    machine(&mut apply);
    let out = apply.output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut run = s.skyc(&["run", "-d", "g.yaml", "--network", "loopback"]);
    machine(&mut run);
    let out = run.output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id: i64 = text(&out.stdout).trim().parse().expect("group id");
    let mut jobs = s.skyc(&[
        "run",
        "--pool",
        "dash-pool",
        "--num-jobs",
        "2",
        "-d",
        "job.yaml",
    ]);
    machine(&mut jobs);
    let out = jobs.output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_restarted(&s, id);
    let d = Dashboard::start(&s.state());
    // The pool's worker ready, with a job on it and one waiting.
    let start = std::time::Instant::now();
    loop {
        let pools = d.json("/api/pools");
        let p = &pools["pools"][0];
        if p["workers"][0]["status"] == "READY"
            && p["workers"][0]["jobs"]
                .as_array()
                .is_some_and(|j| j.len() == 1)
        {
            assert_eq!(p["pending_jobs"].as_array().map(Vec::len), Some(1), "{p:#}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "pool not ready: {pools:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let list = dump_dom(&chromium, &d.url);
    assert!(list.contains(">dash-browser</a>"), "{list}");
    assert!(list.contains(">RUNNING</span>"), "{list}");
    assert!(list.contains("id=\"group-list\""), "{list}");
    assert!(
        list.contains("data-list-rendered-ms="),
        "the figure the benchmark reads"
    );
    // The pool: its worker, ready, with its job, and the job waiting.
    assert!(list.contains(">dash-pool</strong>"), "{list}");
    assert!(list.contains(">READY</span>"), "{list}");
    assert!(list.contains("Pending jobs: "), "{list}");
    screenshot(&chromium, &d.url, &shots.join("list.png"), "1280,800");

    let page = format!("{}#/group/{id}", d.url);
    let dom = dump_dom(&chromium, &page);
    assert!(
        dom.contains("<span id=\"group-name\">dash-browser</span>"),
        "{dom}"
    );
    for host in [
        "trainer-0.dash-browser",
        "trainer-1.dash-browser",
        "buffer-0.dash-browser",
    ] {
        assert!(dom.contains(host), "{host}: {dom}");
    }
    // The restart, in the timeline: node 1's first attempt failed, and
    // the task restarted; the new attempt runs.
    assert!(
        dom.contains("data-outcome=\"failed\" data-restarted=\"true\""),
        "{dom}"
    );
    assert!(dom.contains("trainer-1 · attempt 0"), "{dom}");
    assert!(
        dom.contains("run failed with exit 1; the task restarted"),
        "{dom}"
    );
    assert!(dom.contains("trainer-1 · attempt 1"), "{dom}");
    assert!(dom.contains("data-outcome=\"running\""), "{dom}");
    assert!(
        dom.contains("id=\"cancel\""),
        "a live group has a cancel button"
    );
    // A log, followed: its markup is text, never elements.
    assert!(dom.contains("trainer 0 attempt"), "{dom}");
    assert!(
        dom.contains("&lt;b&gt;bold&lt;/b&gt;&lt;img src=x&gt;"),
        "{dom}"
    );
    assert!(!dom.contains("<b>bold</b>"), "{dom}");
    screenshot(&chromium, &page, &shots.join("group.png"), "1280,1400");

    // A page whose token is wrong shows nothing of the store.
    let bad = d.url.replace(&d.token, &"f".repeat(64));
    let refused = dump_dom(&chromium, &bad);
    assert!(!refused.contains("dash-browser"), "{refused}");

    // Once cancelled, the page says so, live.
    let origin = format!("http://{}", d.addr);
    let r = d.request(
        "POST",
        &format!("/api/groups/{id}/cancel"),
        &[("X-Skyc-Token", &d.token), ("Origin", &origin)],
    );
    assert_eq!(r.status, 202);
    s.wait_finished(id);
    let ended = dump_dom(&chromium, &page);
    assert!(ended.contains(">CANCELLED</span>"), "{ended}");
    assert!(
        !ended.contains("id=\"cancel\""),
        "no cancel button once ended"
    );
    screenshot(
        &chromium,
        &page,
        &shots.join("group-cancelled.png"),
        "1280,1400",
    );
}
