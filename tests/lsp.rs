//! `skyc lsp`: the real binary driven through its standard input and
//! output with LSP messages, answers snapshotted under `snapshots/lsp/`.

use crate::support::{root, skyc, snapshots};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

/// Long enough for a debug build on a busy machine; a server that hangs
/// fails the test instead of blocking it.
const TIMEOUT: Duration = Duration::from_secs(60);
const URI: &str = "file:///work/group.yaml";

/// A client speaking to one `skyc lsp` process.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    from_server: Receiver<Value>,
    next_id: i64,
}

impl Client {
    fn start(args: &[&str]) -> Self {
        let mut child = skyc()
            .arg("lsp")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("skyc lsp starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, from_server) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            while let Some(message) = read_message(&mut reader) {
                if tx.send(message).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            from_server,
            next_id: 1,
        }
    }

    /// Starts a server and initializes it, with `relatedInformation`
    /// support as the client says.
    fn initialized(related_information: bool) -> (Self, Value) {
        let mut client = Self::start(&[]);
        let capabilities = json!({
            "textDocument": {"publishDiagnostics": {"relatedInformation": related_information}},
            "general": {"positionEncodings": ["utf-16"]},
        });
        let result = client.request(
            "initialize",
            json!({"processId": null, "rootUri": null, "capabilities": capabilities}),
        );
        client.notify("initialized", json!({}));
        (client, result)
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, message: &Value) {
        let body = message.to_string();
        self.send_raw(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes());
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request and returns its whole response (result or error).
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.wait(|m| m["id"] == id && m.get("method").is_none())
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let response = self.call(method, params);
        assert!(response.get("error").is_none(), "{method}: {response}");
        response["result"].clone()
    }

    /// The next message that `matches`; others are skipped.
    fn wait(&mut self, matches: impl Fn(&Value) -> bool) -> Value {
        loop {
            match self.from_server.recv_timeout(TIMEOUT) {
                Ok(m) if matches(&m) => return m,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!("skyc lsp did not answer in time"),
                Err(RecvTimeoutError::Disconnected) => panic!("skyc lsp closed its output"),
            }
        }
    }

    /// The next diagnostics published for `URI`.
    fn diagnostics(&mut self) -> Value {
        self.wait(|m| m["method"] == "textDocument/publishDiagnostics")["params"].clone()
    }

    fn open(&mut self, text: &str) -> Value {
        self.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": URI, "languageId": "yaml", "version": 1, "text": text}}),
        );
        self.diagnostics()
    }

    fn change(&mut self, version: i32, text: &str) -> Value {
        self.notify(
            "textDocument/didChange",
            json!({
                "textDocument": {"uri": URI, "version": version},
                "contentChanges": [{"text": text}],
            }),
        );
        self.diagnostics()
    }

    fn at(&mut self, method: &str, line: u32, character: u32) -> Value {
        self.request(
            method,
            json!({
                "textDocument": {"uri": URI},
                "position": {"line": line, "character": character},
            }),
        )
    }

    /// Shuts down and exits; the process's exit status.
    fn shutdown(mut self) -> Option<i32> {
        assert_eq!(self.request("shutdown", Value::Null), Value::Null);
        self.notify("exit", Value::Null);
        self.finish()
    }

    /// Closes the input and waits for the process to end.
    fn finish(mut self) -> Option<i32> {
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "skyc lsp did not exit"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn stderr(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut text);
        }
        text
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_message(reader: &mut impl BufRead) -> Option<Value> {
    let mut length = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("Content-Length: ") {
            length = v.parse().ok();
        }
    }
    let mut body = vec![0; length?];
    reader.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

fn fixture() -> String {
    std::fs::read_to_string(root().join("tests/fixtures/lsp/group.yaml")).unwrap()
}

/// The 0-based line and UTF-16 column of the first `needle` in `text`,
/// plus `extra` characters.
fn find(text: &str, needle: &str, extra: u32) -> (u32, u32) {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} in the text"));
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = text[..at].matches('\n').count();
    let column: usize = text[line_start..at].chars().map(char::len_utf16).sum();
    (line as u32, column as u32 + extra)
}

/// Completion items as `label  (detail)` lines.
fn labels(items: &Value) -> String {
    items
        .as_array()
        .expect("a list of items")
        .iter()
        .map(|i| match i["detail"].as_str() {
            Some(detail) => format!("{}  ({detail})", i["label"].as_str().unwrap_or("?")),
            None => i["label"].as_str().unwrap_or("?").to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap()
}

#[test]
fn lsp_diagnostics_in_utf16_columns_and_fixes() {
    let text = fixture();
    let settings = snapshots("lsp");
    let (mut client, init) = Client::initialized(true);
    settings.bind(|| {
        let mut init = init;
        init["serverInfo"]["version"] = json!("[version]");
        insta::assert_snapshot!("initialize", pretty(&init));

        let published = client.open(&text);
        assert_eq!(published["version"], 1);
        insta::assert_snapshot!("diagnostics_on_open", pretty(&published));
        // `trainr` follows `é` (2 bytes, 1 unit) and `🚀` (4 bytes, 2 units).
        let unknown_host = published["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["code"] == "unknown-host-task")
            .expect("the unknown host");
        let (line, character) = find(&text, "trainr-1", 0);
        assert_eq!((line, character), (13, 30));
        assert_eq!(
            unknown_host["range"],
            json!({"start": {"line": 13, "character": 30}, "end": {"line": 13, "character": 36}})
        );

        // Every "did you mean" of the file, as quick fixes over the whole text.
        let actions = client.request(
            "textDocument/codeAction",
            json!({
                "textDocument": {"uri": URI},
                "range": {"start": {"line": 0, "character": 0}, "end": {"line": 30, "character": 0}},
                "context": {"diagnostics": []},
            }),
        );
        insta::assert_snapshot!("code_actions", pretty(&actions));
        // Only the ones touching a range: the `resourcs` line.
        let (line, _) = find(&text, "resourcs", 0);
        let one = client.request(
            "textDocument/codeAction",
            json!({
                "textDocument": {"uri": URI},
                "range": {"start": {"line": line, "character": 2}, "end": {"line": line, "character": 2}},
                "context": {"diagnostics": []},
            }),
        );
        assert_eq!(one.as_array().map(Vec::len), Some(1), "{one}");
        assert_eq!(one[0]["title"], "Replace `resourcs` with `resources`");

        // Applying every fix leaves one error: the node index out of range.
        let fixed = apply(&text, &actions);
        let published = client.change(2, &fixed);
        assert_eq!(published["version"], 2);
        insta::assert_snapshot!("diagnostics_after_fixes", pretty(&published));
    });
    assert_eq!(client.shutdown(), Some(0));
}

/// `text` with the edits of every code action applied (one edit each, on
/// distinct lines).
fn apply(text: &str, actions: &Value) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for action in actions.as_array().unwrap() {
        let edit = &action["edit"]["changes"][URI][0];
        let line = edit["range"]["start"]["line"].as_u64().unwrap() as usize;
        let units = |p: &str| edit["range"][p]["character"].as_u64().unwrap() as usize;
        let byte = |s: &str, units: usize| {
            let mut n = 0;
            s.char_indices()
                .find(|(_, c)| {
                    let hit = n >= units;
                    n += c.len_utf16();
                    hit
                })
                .map_or(s.len(), |(i, _)| i)
        };
        let s = &lines[line];
        let (start, end) = (byte(s, units("start")), byte(s, units("end")));
        lines[line] = format!(
            "{}{}{}",
            &s[..start],
            edit["newText"].as_str().unwrap(),
            &s[end..]
        );
    }
    lines.join("\n") + "\n"
}

#[test]
fn lsp_completion_hover_and_definition() {
    let text = fixture();
    let settings = snapshots("lsp");
    let (mut client, _) = Client::initialized(true);
    client.open(&text);
    let mut transcript = String::new();
    let mut section = |title: &str, body: String| {
        transcript.push_str(&format!("### {title}\n{body}\n\n"));
    };

    // Keys of `termination_delay`: `default` and the auxiliary tasks.
    let (line, _) = find(&text, "evaluater", 0);
    section(
        "termination_delay keys",
        labels(&client.at("textDocument/completion", line, 2)),
    );
    // The fields of a task's `resources`, less those written.
    let (line, character) = find(&text, "  infra: kubernetes", 0);
    let edited = text.replacen("  infra: kubernetes\n", "  infra: kubernetes\n  \n", 1);
    client.change(2, &edited);
    let items = client.at("textDocument/completion", line + 1, character + 2);
    section("resources fields", labels(&items));
    let cpus = items
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["label"] == "cpus")
        .cloned()
        .unwrap();
    section("one field in full", pretty(&cpus));
    // Values: accelerators and infra.
    let (line, character) = find(&edited, "H100:8", 0);
    section(
        "accelerators",
        labels(&client.at("textDocument/completion", line, character)),
    );
    let (line, character) = find(&edited, "kubernetes", 0);
    section(
        "infra",
        labels(&client.at("textDocument/completion", line, character)),
    );
    // Task names in `primary_tasks`, while the edit leaves the YAML broken.
    let broken = edited.replacen("primary_tasks: [trainer]", "primary_tasks: [trainer, ev", 1);
    let published = client.change(3, &broken);
    assert_eq!(
        published["diagnostics"][0]["code"], "yaml-syntax",
        "{published}"
    );
    let (line, character) = find(&broken, "[trainer, ev", 12);
    section(
        "primary_tasks while the YAML is broken",
        labels(&client.at("textDocument/completion", line, character)),
    );
    // A job_recovery mapping and its strategy.
    let recovery = edited.replacen(
        "  infra: kubernetes\n  \n",
        "  infra: kubernetes\n  job_recovery:\n    strategy: \n    \n",
        1,
    );
    client.change(4, &recovery);
    let (line, character) = find(&recovery, "strategy: ", 10);
    section(
        "job_recovery strategy",
        labels(&client.at("textDocument/completion", line, character)),
    );
    section(
        "job_recovery fields",
        labels(&client.at("textDocument/completion", line + 1, 4)),
    );
    // The header's own fields, in a new line of the header.
    let header = text.replacen("execution: parallel\n", "execution: parallel\n\n", 1);
    client.change(5, &header);
    let (line, _) = find(&header, "execution", 0);
    section(
        "header fields",
        labels(&client.at("textDocument/completion", line + 1, 0)),
    );

    client.change(6, &text);
    // Hover: fields (top level, nested), and hostnames.
    for (what, needle, extra) in [
        ("hover execution", "execution", 2),
        ("hover resources.accelerators", "accelerators", 3),
        ("hover termination_delay", "termination_delay", 0),
        ("hover a hostname past num_nodes", "trainer-2", 3),
        ("hover a value (nothing)", "kubernetes", 2),
    ] {
        let (line, character) = find(&text, needle, extra);
        section(
            what,
            pretty(&client.at("textDocument/hover", line, character)),
        );
    }
    // Definition: from a hostname in a script to the task, from
    // `primary_tasks`, and from nowhere in particular.
    for (what, needle, extra) in [
        ("definition from a hostname", "trainer-2.${", 4),
        ("definition from primary_tasks", "[trainer]", 2),
        ("definition from an unknown task", "trainr-1", 1),
        ("definition from a field", "num_nodes", 1),
    ] {
        let (line, character) = find(&text, needle, extra);
        section(
            what,
            pretty(&client.at("textDocument/definition", line, character)),
        );
    }
    settings.bind(|| insta::assert_snapshot!("completion_hover_definition", transcript));
    assert_eq!(client.shutdown(), Some(0));
}

#[test]
fn lsp_survives_bad_input() {
    let settings = snapshots("lsp");
    let mut transcript = String::new();
    let mut client = Client::start(&["--stdio"]);
    let mut record = |title: &str, v: &Value| {
        transcript.push_str(&format!("### {title}\n{}\n\n", pretty(v)));
    };
    // Before `initialize`: requests are refused, notifications dropped.
    let early = client.call("textDocument/hover", json!({}));
    record("a request before initialize", &early);
    let (mut client, _) = {
        drop(client);
        Client::initialized(false)
    };
    // A body that is not JSON: an error without id, and the server goes on.
    client.send_raw(b"Content-Length: 9\r\n\r\n{not json");
    record(
        "a malformed message",
        &client.wait(|m| m["id"].is_null() && m.get("error").is_some()),
    );
    record(
        "an unknown method",
        &client.call("workspace/unknownThing", json!({})),
    );
    client.notify("$/unknownNotification", json!({}));
    record(
        "invalid params",
        &client.call("textDocument/hover", json!({"textDocument": 3})),
    );
    // A change to a document never opened: logged, not fatal.
    client.notify(
        "textDocument/didChange",
        json!({
            "textDocument": {"uri": "file:///never-opened.yaml", "version": 2},
            "contentChanges": [{"text": "name: x\n"}],
        }),
    );
    record(
        "didChange for an unopened document",
        &client.wait(|m| m["method"] == "window/logMessage"),
    );
    // A document that is not a Job Group (nor a task): diagnostics, and
    // empty answers to the rest.
    let published = client.open("- apiVersion: v1\n- kind: Pod\n");
    record("a document that is not a Job Group", &published);
    record(
        "completion in it",
        &client.at("textDocument/completion", 1, 3),
    );
    record("hover in it", &client.at("textDocument/hover", 0, 3));
    // A help line goes into the message when the client shows no related
    // information.
    let published = client.change(2, "name: t\nrunn: echo\n");
    record("help in the message", &published);
    // A document past the compiler's 4 MiB limit.
    let huge = format!(
        "name: t\nrun: |\n{}",
        "  echo 0123456789abcdef\n".repeat(200_000)
    );
    assert!(huge.len() > 4 << 20);
    let published = client.change(3, &huge);
    record("a huge document", &published);
    record(
        "completion in the huge document",
        &client.at("textDocument/completion", 2, 4),
    );
    // Requests after `shutdown` are refused; `exit` then ends with 0.
    assert_eq!(client.request("shutdown", Value::Null), Value::Null);
    record(
        "a request after shutdown",
        &client.call("textDocument/hover", json!({})),
    );
    client.notify("exit", Value::Null);
    assert_eq!(client.finish(), Some(0));
    settings.bind(|| insta::assert_snapshot!("bad_input", transcript));
}

#[test]
fn lsp_exit_statuses() {
    // `exit` without `shutdown`: 1, as LSP asks.
    let (mut client, _) = Client::initialized(false);
    client.notify("exit", Value::Null);
    assert_eq!(client.finish(), Some(1));
    // The input closed without `shutdown`: 1 as well.
    let (client, _) = Client::initialized(false);
    assert_eq!(client.finish(), Some(1));
    // Framing lost (no Content-Length): a message and 2, no hang.
    let mut client = Client::start(&[]);
    client.send_raw(b"Hello: there\r\n\r\n{}");
    let status = {
        drop(client.stdin.take());
        let deadline = std::time::Instant::now() + TIMEOUT;
        loop {
            if let Some(s) = client.child.try_wait().unwrap() {
                break s.code();
            }
            assert!(std::time::Instant::now() < deadline, "no exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    assert_eq!(status, Some(2));
    assert_eq!(
        client.stderr(),
        "skyc lsp: a message header without Content-Length\n"
    );
}

/// The CI files the repository ships run commands skyc has: each
/// pre-commit hook's `entry`, and each `skyc check` of the example
/// workflow, on a file with errors and on a clean one.
#[test]
fn ci_hooks_and_workflow_run_real_commands() {
    use skyc_compiler::yaml::{Budget, Node, Reader};
    let broken = root().join("tests/fixtures/lsp/group.yaml");
    let clean = root().join("examples/train-eval.yaml");
    let run = |args: &[&str], file: &std::path::Path| {
        let o = skyc().args(args).arg(file).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };

    let hooks = std::fs::read_to_string(root().join(".pre-commit-hooks.yaml")).unwrap();
    let mut diagnostics = skyc_compiler::Diagnostics::default();
    let documents = Reader::read(&hooks, Budget::default(), &mut diagnostics);
    assert!(!diagnostics.has_errors(), "the hooks file reads as YAML");
    let hooks = documents[0].root.as_seq().expect("a list of hooks");
    assert_eq!(hooks.len(), 2);
    for hook in hooks {
        let entry = hook.get("entry").and_then(Node::as_str).unwrap();
        let mut words = entry.split_whitespace();
        assert_eq!(words.next(), Some("skyc"), "{entry}");
        let args: Vec<&str> = words.collect();
        assert_eq!(run(&args, &broken).0, Some(1), "{entry} on errors");
        assert_eq!(run(&args, &clean).0, Some(0), "{entry} on a clean file");
    }

    let workflow = std::fs::read_to_string(root().join("docs/ci/skyc.yml")).unwrap();
    let commands: Vec<&str> = workflow
        .lines()
        .filter_map(|l| l.trim().strip_prefix("run: skyc check "))
        .collect();
    assert_eq!(commands.len(), 2, "{workflow}");
    for command in commands {
        let format = command.split_whitespace().nth(1).unwrap();
        let (status, out) = run(&["check", "--format", format], &broken);
        assert_eq!(status, Some(1), "{command}");
        match format {
            "github" => assert!(out.starts_with("::error file="), "{out}"),
            "sarif" => {
                let sarif: Value = serde_json::from_str(&out).unwrap();
                assert_eq!(
                    sarif["runs"][0]["results"].as_array().map(Vec::len),
                    Some(4)
                );
            }
            other => panic!("unexpected format {other}"),
        }
    }
}
