//! Hostile input: the real `skyc` binary on files built to hurt it (alias
//! bombs, deep nesting, huge files and lines, binary junk, bad paths), and a
//! randomized no-panic test of the library on mutated examples.
//!
//! Every case must end in a clean error: exit 1 (the input is invalid) or 2
//! (usage or I/O), no panic, a location in the diagnostic when the error is
//! about the content, and bounded cost. The cost targets (1 s wall, 100 MB
//! peak RSS) are for a release build; the tests run a debug build, often
//! beside other tests, so by default they assert a generous bound on CPU
//! time (which a busy machine inflates less than wall time) and RSS, and
//! print what they measured (run with `--nocapture` to see it). To check
//! the targets:
//!
//! ```sh
//! cargo build --release
//! SKYC_BIN=target/release/skyc SKYC_HOSTILE_STRICT=1 \
//!     cargo test --test main hostile -- --nocapture --test-threads 1
//! ```
//!
//! Peak RSS and CPU time come from GNU time (`/usr/bin/time -f '%M %U %S'`,
//! the kernel's `ru_maxrss` and `ru_utime`/`ru_stime` of the child) when it
//! is installed; otherwise RSS comes from polling the child's `VmHWM` in
//! `/proc`, which can miss growth in its last milliseconds, and the bound
//! applies to wall time. Inputs are written under Cargo's target tmp directory at
//! test time and removed afterwards.

use crate::support;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestRunner};
use skyc_compiler::{MAX_FILE_BYTES, Options, compile};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Exit statuses (src/cli/mod.rs).
const INVALID: i32 = 1;
const USAGE: i32 = 2;

/// The release targets.
const TARGET_WALL: Duration = Duration::from_secs(1);
const TARGET_RSS_KB: u64 = 100 * 1000;
/// Generous bounds for a debug build (its slowest cases take about 3 s of
/// CPU).
const DEBUG_CPU: Duration = Duration::from_secs(10);
const DEBUG_RSS_KB: u64 = 400 * 1000;
/// A case still running after this is hung: kill it and fail.
const HANG: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// Cases.

#[test]
fn alias_bomb_billion_laughs() {
    // Nine levels of nine aliases: 9^9 strings once expanded.
    let mut text = String::from("lol0: &lol0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..=9 {
        let refs = vec![format!("*lol{}", i - 1); 9].join(", ");
        let _ = writeln!(text, "lol{i}: &lol{i} [{refs}]");
    }
    let case = Case::new("billion-laughs");
    let file = case.file("laughs.yaml", text);
    let out = case.check(&file);
    out.assert_error(INVALID, "yaml-limit");
    out.assert_located("laughs.yaml");
}

#[test]
fn alias_bomb_through_merge_keys() {
    // Each mapping merges the previous one and holds it twice more.
    let mut text = String::from("m0: &m0 {k0: lol, k1: lol}\n");
    for i in 1..40 {
        let p = i - 1;
        let _ = writeln!(
            text,
            "m{i}: &m{i} {{<<: [*m{p}], x{i}: *m{p}, y{i}: *m{p}}}"
        );
    }
    let case = Case::new("merge-bomb");
    let file = case.file("merge.yaml", text);
    let out = case.check(&file);
    out.assert_error(INVALID, "yaml-limit");
    out.assert_located("merge.yaml");
}

#[test]
fn alias_bomb_of_long_strings() {
    // Few nodes, many bytes: a 1 MB string aliased 100 times.
    let big = "x".repeat(1_000_000);
    let refs = vec!["*a"; 100].join(", ");
    let text = format!("name: a\nrun: echo\nenvs:\n  A: &a \"{big}\"\n  B: [{refs}]\n");
    let case = Case::new("string-bomb");
    let file = case.file("strings.yaml", text);
    let out = case.check(&file);
    out.assert_error(INVALID, "yaml-limit");
    out.assert_located("strings.yaml");
    // Just under the byte budget, so the whole expansion is analyzed (env
    // values are stringified, copying it again), with an error at the end.
    let refs = vec!["*a"; 14].join(", ");
    let text =
        format!("name: a\nrun: echo\nenvs:\n  A: &a \"{big}\"\n  B: [{refs}]\nnum_nodes: 0\n");
    let file = case.file("under.yaml", text);
    let out = case.check(&file);
    out.assert_error(INVALID, "invalid-num-nodes");
    out.assert_located("under.yaml:6:");
}

#[test]
fn ten_megabyte_file() {
    let case = Case::new("ten-megabytes");
    let file = case.file("big.yaml", repetitive_task_lines(10 << 20));
    let out = case.check(&file);
    out.assert_error(INVALID, "file-too-large");
    // About the file, not a place in it: the name is not required.
}

#[test]
fn one_byte_over_the_size_limit() {
    let case = Case::new("over-limit");
    let file = case.file("over.yaml", repetitive_task_lines(MAX_FILE_BYTES + 1));
    case.check(&file).assert_error(INVALID, "file-too-large");
}

#[test]
fn just_under_the_size_limit() {
    // Realistic-looking tasks filling the size limit are more YAML nodes
    // than the budget reads (about 22,000 tasks): a clean, located stop.
    let case = Case::new("under-limit");
    let text = realistic_group(MAX_FILE_BYTES - 1024, "task-0");
    assert!(text.len() < MAX_FILE_BYTES);
    let file = case.file("group.yaml", text);
    let out = case.check(&file);
    out.assert_error(INVALID, "yaml-limit");
    out.assert_located("group.yaml");
    // A third of that (7,000 tasks) is read whole; its last task repeats
    // the first one's name, so the error spans the whole file.
    let file = case.file("third.yaml", realistic_group(MAX_FILE_BYTES / 3, "task-0"));
    let out = case.check(&file);
    out.assert_error(INVALID, "duplicate-task-name");
    out.assert_located("third.yaml");
}

#[test]
fn mapping_with_a_quarter_million_keys() {
    // A flat mapping just under the size limit: keys are checked for
    // duplicates as they are read, so this is cheap only if that is.
    let case = Case::new("many-keys");
    let mut text = String::from("name: a\nrun: echo\nenvs:\n");
    let mut i = 0;
    while text.len() < MAX_FILE_BYTES - 64 {
        let _ = writeln!(text, "  KEY_{i}: v");
        i += 1;
    }
    let file = case.file("keys.yaml", text);
    let out = case.check(&file);
    out.assert_error(INVALID, "yaml-limit");
    out.assert_located("keys.yaml");
}

#[test]
fn hundred_thousand_deep_block_sequences() {
    let case = Case::new("deep-block");
    let file = case.file("deep.yaml", format!("{}x\n", "- ".repeat(100_000)));
    let out = case.check(&file);
    out.assert_error(INVALID, "yaml-limit");
    out.assert_located("deep.yaml");
}

#[test]
fn deep_block_mappings() {
    // Indentation grows with depth, so 2,000 levels is what fits in the
    // size limit.
    let case = Case::new("deep-block-map");
    let mut text = String::new();
    for depth in 0..2_000 {
        let _ = writeln!(text, "{}k:", " ".repeat(depth));
    }
    let file = case.file("deep.yaml", text);
    let out = case.check(&file);
    out.assert_error(INVALID, "yaml-limit");
    out.assert_located("deep.yaml");
}

#[test]
fn hundred_thousand_deep_flow_sequences() {
    let case = Case::new("deep-flow");
    let text = format!("{}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let file = case.file("deep.yaml", text);
    let out = case.check(&file);
    out.assert_error(INVALID, "yaml-limit");
    out.assert_located("deep.yaml");
}

#[test]
fn hundred_thousand_deep_flow_mappings() {
    let case = Case::new("deep-flow-map");
    let text = format!("{}1{}\n", "{a: ".repeat(100_000), "}".repeat(100_000));
    let file = case.file("deep.yaml", text);
    let out = case.check(&file);
    out.assert_error(INVALID, "yaml-limit");
    out.assert_located("deep.yaml");
}

#[test]
fn unclosed_deep_flow_nesting() {
    let case = Case::new("deep-flow-unclosed");
    let file = case.file("deep.yaml", "{[".repeat(50_000));
    let out = case.check(&file);
    out.assert_error(INVALID, "yaml-limit");
    out.assert_located("deep.yaml");
}

#[test]
fn invalid_utf8() {
    let case = Case::new("invalid-utf8");
    let mut bytes = b"name: a\nrun: echo caf".to_vec();
    bytes.extend_from_slice(&[0xC3, 0x28, 0xFF, 0xFE]);
    bytes.extend_from_slice(b" done\n");
    let file = case.file("latin.yaml", bytes);
    let out = case.check(&file);
    out.assert_error(INVALID, "invalid-utf8");
    out.assert_located("latin.yaml:2:");
}

#[test]
fn nul_bytes_in_a_valid_file() {
    let case = Case::new("nul-bytes");
    let mut text = valid_task().into_bytes();
    let middle = text.len() / 2;
    text.splice(middle..middle, *b"\0\0\0");
    let file = case.file("nul.yaml", text);
    let out = case.check(&file);
    out.assert_error(INVALID, "yaml-syntax");
    out.assert_located("nul.yaml");
}

#[test]
fn random_binary_junk() {
    let case = Case::new("binary-junk");
    for (i, seed) in [1u64, 2, 3, 0xDEAD_BEEF].into_iter().enumerate() {
        let name = format!("junk{i}.bin");
        let file = case.file(&name, junk(seed, 64 << 10));
        let out = case.check(&file);
        out.assert_failed(INVALID);
        out.assert_located(&name);
    }
}

#[test]
fn random_yaml_punctuation() {
    // Valid UTF-8, all structure: the reader must reject it, not panic.
    const ALPHABET: &[u8] = b"-:?[]{},#&*!|>'\"%@`\t\n \\<=~.0a";
    let case = Case::new("punctuation");
    for seed in 1..=4u64 {
        let bytes: Vec<u8> = junk(seed, 256 << 10)
            .into_iter()
            .map(|b| ALPHABET[usize::from(b) % ALPHABET.len()])
            .collect();
        let name = format!("punct{seed}.yaml");
        let file = case.file(&name, bytes);
        let out = case.check(&file);
        out.assert_failed(INVALID);
        out.assert_located(&name);
    }
}

#[test]
fn directory_as_file() {
    let case = Case::new("directory");
    let dir = case.dir.join("group.yaml");
    fs::create_dir_all(&dir).unwrap();
    let out = case.check(&dir);
    out.assert_failed(USAGE);
    assert!(out.stderr.contains("is a directory"), "{}", out.stderr);
    // The other commands read files the same way.
    let out = case.run(&[os("build"), os("--target"), os("ir"), dir.into()], None);
    out.assert_failed(USAGE);
    assert!(out.stdout.is_empty(), "no IR for a directory");
}

#[test]
fn missing_file() {
    let case = Case::new("missing");
    let out = case.check(&case.dir.join("nope.yaml"));
    out.assert_failed(USAGE);
    assert!(out.stderr.contains("no such file"), "{}", out.stderr);
}

#[test]
fn missing_file_among_valid_ones() {
    // An I/O failure wins over the other files' verdicts.
    let case = Case::new("missing-among");
    let good = case.file("good.yaml", valid_task());
    let bad = case.file("bad.yaml", "name: a\nrun: echo\nnum_nodes: 0\n");
    let out = case.run(
        &[
            os("check"),
            good.into(),
            case.dir.join("nope.yaml").into(),
            bad.into(),
        ],
        None,
    );
    out.assert_failed(USAGE);
    out.assert_located("bad.yaml:3:");
}

#[test]
fn empty_file() {
    let case = Case::new("empty");
    let file = case.file("empty.yaml", "");
    case.check(&file).assert_error(INVALID, "empty-file");
}

#[test]
fn stdin_junk() {
    let case = Case::new("stdin-junk");
    let args = [os("check"), os("--color"), os("never"), os("-")];
    let out = case.run(&args, Some(junk(7, 1 << 20)));
    out.assert_failed(INVALID);
    out.assert_located("<stdin>");
    // More than the limit: skyc stops reading at the limit, so the writer
    // sees a closed pipe, and nothing hangs.
    let out = case.run(&args, Some(repetitive_task_lines(12 << 20).into_bytes()));
    out.assert_error(INVALID, "file-too-large");
}

#[test]
fn huge_single_line() {
    let case = Case::new("long-line");
    // A 4 MB flow sequence on one line, never closed.
    let mut text = String::from("name: a\nrun: echo\nports: [");
    text.push_str(&"8080, ".repeat((MAX_FILE_BYTES - 64) / 6));
    let file = case.file("line.yaml", text);
    let out = case.check(&file);
    out.assert_failed(INVALID);
    out.assert_located("line.yaml:3:");
    // A 4 MB plain scalar where a number belongs: the excerpt is that line.
    let text = format!(
        "name: a\nrun: echo\nnum_nodes: {}\n",
        "x".repeat(MAX_FILE_BYTES - 64)
    );
    let file = case.file("scalar.yaml", text);
    let out = case.check(&file);
    out.assert_failed(INVALID);
    out.assert_located("scalar.yaml:3:");
}

#[test]
fn million_document_separators() {
    let case = Case::new("separators");
    let text = "---\n".repeat(1_000_000);
    assert!(text.len() < MAX_FILE_BYTES);
    let file = case.file("seps.yaml", text);
    let out = case.check(&file);
    out.assert_error(INVALID, "yaml-limit");
    out.assert_located("seps.yaml");
}

#[test]
fn very_long_keys() {
    let case = Case::new("long-keys");
    // One key of 4 MB: longer than YAML allows an implicit key.
    let text = format!(
        "name: a\nrun: echo\n{}: v\n",
        "k".repeat(MAX_FILE_BYTES - 64)
    );
    let file = case.file("one.yaml", text);
    let out = case.check(&file);
    out.assert_failed(INVALID);
    out.assert_located("one.yaml:3:");
    // Explicit (`? `) keys have no length limit: 3,000 unknown fields of
    // 1 KB each, which the schema must report without suggesting
    // anything expensive.
    let mut text = String::from("name: a\nrun: echo\n");
    for i in 0..3_000 {
        let _ = writeln!(text, "? {i:04}{}\n: v", "k".repeat(1020));
    }
    let file = case.file("many.yaml", text);
    let out = case.check(&file);
    out.assert_error(INVALID, "unknown-field");
    out.assert_located("many.yaml");
}

#[test]
fn unsafe_python_tags() {
    let case = Case::new("tags");
    let texts = [
        "name: a\nrun: !!python/object:os.system echo\n",
        "name: a\nrun: !!python/object/apply:os.system [\"rm -rf /\"]\n",
        "name: a\nrun: echo\nenvs: !!python/name:os.environ {}\n",
        "!!python/object/new:subprocess.Popen\nargs: [id]\n",
        "name: a\nrun: !<tag:yaml.org,2002:python/object:x> y\n",
        "%TAG !p! tag:yaml.org,2002:python/\n---\nname: !p!object:os.system a\nrun: echo\n",
        "name: !!binary aGVsbG8=\nrun: echo\n",
        "name: !custom a\nrun: echo\n",
    ];
    for (i, text) in texts.iter().enumerate() {
        let name = format!("tag{i}.yaml");
        let file = case.file(&name, text);
        let out = case.check(&file);
        out.assert_error(INVALID, "unsupported-tag");
        out.assert_located(&name);
    }
}

#[test]
fn hundred_thousand_tasks() {
    // 100,000 minimal tasks fit in the size limit; with the header they
    // exceed the node budget, which stops reading.
    let case = Case::new("tasks-100k");
    let file = case.file("tasks.yaml", group_of_tasks(100_000, ""));
    let out = case.check(&file);
    out.assert_error(INVALID, "yaml-limit");
    out.assert_located("tasks.yaml");
}

#[test]
fn forty_nine_thousand_tasks() {
    // Just under the node budget (five nodes a task), so every task is
    // analyzed; the last one repeats the first one's name.
    let case = Case::new("tasks-49k");
    let file = case.file(
        "tasks.yaml",
        group_of_tasks(49_000, "---\nname: t0\nrun: x\n"),
    );
    let out = case.check(&file);
    out.assert_error(INVALID, "duplicate-task-name");
    out.assert_located("tasks.yaml");
}

// Floods: one problem per line of a file near the size limit. A file
// reports at most MAX_DIAGNOSTICS of them (the rest are counted), and the
// producers stop building diagnostics once none would be shown, so each
// costs about as much as reading the file.

#[test]
fn flood_of_duplicate_keys() {
    let case = Case::new("flood-duplicate-keys");
    let text = format!("name: a\nrun: echo\nenvs:\n{}", "  K: v\n".repeat(240_000));
    let file = case.file("dups.yaml", text);
    case.check(&file).assert_error(INVALID, "duplicate-key");
    let json = [os("check"), os("--format"), os("json"), file.into()];
    case.run(&json, None).assert_failed(INVALID);
}

#[test]
fn flood_of_unknown_fields() {
    let case = Case::new("flood-unknown-fields");
    let mut text = String::from("name: a\nrun: echo\n");
    for i in 0..120_000 {
        let _ = writeln!(text, "k{i}: v");
    }
    let file = case.file("fields.yaml", text);
    case.check(&file).assert_error(INVALID, "unknown-field");
}

#[test]
fn flood_of_bad_host_references() {
    let case = Case::new("flood-host-references");
    let mut text = String::from("name: g\nexecution: parallel\n---\nname: t\nrun: |\n");
    for i in 1..200_000 {
        let _ = writeln!(text, "  ping t-{i}.g");
    }
    let file = case.file("hosts.yaml", text);
    case.check(&file)
        .assert_error(INVALID, "host-index-out-of-range");
}

#[test]
fn flood_of_primary_tasks() {
    let case = Case::new("flood-primary-tasks");
    // As many tasks as the node budget reads (each is five nodes).
    let names: Vec<String> = (0..40_000).map(|i| format!("t{i}")).collect();
    let mut text = format!(
        "name: g\nexecution: parallel\nprimary_tasks: [{}, nope]\n",
        names.join(", ")
    );
    for name in &names {
        let _ = write!(text, "---\nname: {name}\nrun: x\n");
    }
    let file = case.file("primary.yaml", text);
    case.check(&file)
        .assert_error(INVALID, "unknown-primary-task");
}

#[test]
fn flood_of_documents_that_are_not_mappings() {
    let case = Case::new("flood-not-mappings");
    let text = format!(
        "name: g\nexecution: parallel\n{}",
        "--- 1\n".repeat(240_000)
    );
    let file = case.file("scalars.yaml", text);
    let json = [os("check"), os("--format"), os("json"), file.into()];
    case.run(&json, None).assert_failed(INVALID);
}

#[test]
fn every_format_on_hostile_input() {
    // The machine formats must stay well-formed on the same input.
    let case = Case::new("formats");
    let mut junk_yaml = valid_task().into_bytes();
    junk_yaml.extend(junk(11, 4096));
    let laughs = "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n\
                  c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c]\n\
                  e: &e [*d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e]\n\
                  g: [*f, *f, *f, *f, *f, *f, *f, *f]\n";
    let inputs = [
        case.file("junk.yaml", junk_yaml),
        case.file("laughs.yaml", laughs),
        case.file("deep.yaml", "[".repeat(10_000)),
        case.file("empty.yaml", ""),
    ];
    for format in ["json", "sarif", "github"] {
        for input in &inputs {
            let args = [os("check"), os("--format"), os(format), input.into()];
            let out = case.run(&args, None);
            out.assert_failed(INVALID);
            match format {
                "github" => assert!(out.stdout.starts_with("::error "), "{}", out.stdout),
                _ => {
                    let v: serde_json::Value = serde_json::from_str(&out.stdout)
                        .unwrap_or_else(|e| panic!("{format}: {e}\n{}", out.stdout));
                    assert!(!v.is_null());
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Randomized: the library on mutated examples.

/// Text inserted by mutations: YAML punctuation and the keys the analyzer
/// cares about.
const FRAGMENTS: &[&str] = &[
    "num_nodes:",
    "num_nodes: 0",
    "resources:",
    "resources:\n  ",
    "accelerators: ",
    "any_of:\n  - ",
    "ordered:",
    "ports: ",
    "envs:\n  A: ",
    "secrets:",
    "file_mounts:\n  ",
    "volumes:",
    "name: ",
    "run: |\n  ",
    "setup: ",
    "execution: parallel\n",
    "primary_tasks: [",
    "termination_delay: ",
    "job_recovery:",
    "&a ",
    "*a",
    "<<: *a",
    "<<: [*a, *b]",
    "!!",
    "!!str ",
    "!!python/object ",
    "? ",
    ": ",
    "- ",
    "---\n",
    "...\n",
    "%YAML 1.1\n",
    "{",
    "}",
    "[",
    "]",
    ",",
    "#",
    "|",
    ">-",
    "'",
    "\"",
    "\\",
    "\t",
    "\n",
    "\r\n",
    "\n    ",
    "\0",
    "\u{FEFF}",
    "é",
    "ß",
    "ⓝ",
    "🦀",
    "\u{2028}",
    "${SKYPILOT_JOBGROUP_NAME}",
    "-0.",
    "$SKYPILOT_NUM_NODES",
    "1e999",
    "0x1F",
    "0o17",
    "1_000",
    ".inf",
    "~",
    "=",
    "null",
    "yes",
    "99999999999999999999",
    "16+",
    "32GB",
];

#[derive(Clone, Debug)]
enum Mutation {
    /// Replace a byte with any byte (invalid UTF-8 included).
    Flip(Index, u8),
    Insert(Index, &'static str),
    Delete(Index, u8),
    Truncate(Index),
    /// Copy a range of the text elsewhere.
    Duplicate(Index, Index, Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        4 => (any::<Index>(), proptest::sample::select(FRAGMENTS))
            .prop_map(|(i, f)| Mutation::Insert(i, f)),
        2 => (any::<Index>(), 1..32u8).prop_map(|(i, n)| Mutation::Delete(i, n)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        1 => (any::<Index>(), any::<Index>(), any::<Index>())
            .prop_map(|(a, b, c)| Mutation::Duplicate(a, b, c)),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let at = |i: &Index, len: usize| if len == 0 { 0 } else { i.index(len + 1) };
    let len = bytes.len();
    match m {
        Mutation::Flip(i, b) if len > 0 => bytes[i.index(len)] = *b,
        Mutation::Flip(..) => {}
        Mutation::Insert(i, f) => {
            let i = at(i, len);
            bytes.splice(i..i, f.bytes());
        }
        Mutation::Delete(i, n) => {
            let i = at(i, len);
            bytes.drain(i..(i + usize::from(*n)).min(len));
        }
        Mutation::Truncate(i) => bytes.truncate(at(i, len)),
        Mutation::Duplicate(a, b, c) => {
            let (mut from, mut to) = (at(a, len), at(b, len));
            if from > to {
                std::mem::swap(&mut from, &mut to);
            }
            let chunk = bytes[from..to.min(from + 256)].to_vec();
            let i = at(c, len);
            bytes.splice(i..i, chunk);
        }
    }
}

/// SkyPilot's examples when the reference material is beside the
/// repository, else a small inline group.
fn seeds() -> &'static [Vec<u8>] {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let examples = support::root().join("../shared/reference/skypilot-examples");
        let files = if examples.is_dir() {
            support::yaml_files(&examples)
        } else {
            Vec::new()
        };
        let mut seeds: Vec<Vec<u8>> = files.iter().filter_map(|p| fs::read(p).ok()).collect();
        seeds.push(INLINE_SAMPLE.as_bytes().to_vec());
        seeds
    })
}

const INLINE_SAMPLE: &str = "\
# A Job Group: header, then one task per document.
---
name: rl-group
execution: parallel
primary_tasks: [trainer]
termination_delay:
  default: 30s
  replay: 1m
---
name: trainer
num_nodes: 2
resources: &res
  accelerators: {H100: 8}
  cpus: 16+
  memory: 64GB+
  infra: k8s
  ports: [8080, 9000-9010]
envs:
  BATCH: 32
  MODEL: null
run: |
  torchrun --nnodes=$SKYPILOT_NUM_NODES --master_addr=trainer-0.${SKYPILOT_JOBGROUP_NAME} train.py
  curl http://replay-0.${SKYPILOT_JOBGROUP_NAME}:8080/health
---
name: replay
resources:
  <<: *res
  accelerators: null
  any_of:
    - {cpus: 4}
    - {cpus: 8, memory: 32}
file_mounts:
  /data: s3://bucket/data
setup: pip install ray
run: python replay.py --peer trainer-1.rl-group
";

/// `Compilation::check_invariants`: spans inside the text on character
/// boundaries, verdict and IR agreeing, every format rendering.
fn check_compilation(bytes: &[u8]) -> Result<(), TestCaseError> {
    let c = compile("fuzz.yaml", bytes, &Options::default());
    c.check_invariants().map_err(TestCaseError::fail)
}

#[test]
fn mutated_examples_never_panic() {
    // PROPTEST_CASES runs more (e.g. 100000 with `--release`).
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2048,
        ..Config::default()
    };
    let strategy = (any::<Index>(), proptest::collection::vec(mutation(), 1..12));
    TestRunner::new(config)
        .run(&strategy, |(seed, mutations)| {
            let seeds = seeds();
            let mut bytes = seeds[seed.index(seeds.len())].clone();
            for m in &mutations {
                apply(&mut bytes, m);
            }
            check_compilation(&bytes)
        })
        .unwrap();
}

#[test]
fn unmutated_seeds_hold_the_invariants() {
    for seed in seeds() {
        check_compilation(seed).unwrap();
    }
}

/// Inputs the fuzzer (fuzz/) found.
#[test]
fn fuzz_regressions() {
    let inputs: &[&[u8]] = &[
        // A non-finite float as the group name passed the schema (as the
        // text `inf`): no error, and no IR.
        b"name: .INF\nexecution: parallel\n---\nname: a\nrun: echo a\n",
    ];
    for input in inputs {
        check_compilation(input).unwrap();
        let c = compile("regression.yaml", input, &Options::default());
        assert!(c.has_errors(), "{}", support::render_human(&c));
    }
}

// ---------------------------------------------------------------------------
// Inputs.

fn valid_task() -> String {
    "name: train\nnum_nodes: 2\nresources:\n  cpus: 4+\n  memory: 16GB\nenvs:\n  A: b\n\
     setup: pip install torch\nrun: |\n  python train.py --epochs 3\n  echo done\n"
        .to_owned()
}

/// `len` bytes of a plausible task, cut where the length runs out.
fn repetitive_task_lines(len: usize) -> String {
    let mut text = String::with_capacity(len + 64);
    text.push_str("name: a\nrun: |\n");
    while text.len() < len {
        text.push_str("  echo 'the same line of a long script, again'\n");
    }
    text.truncate(len);
    text
}

/// A Job Group of varied-looking tasks, up to `len` bytes; the last task is
/// named `last`.
fn realistic_group(len: usize, last: &str) -> String {
    let mut text = String::from("# generated\n---\nname: big-group\nexecution: parallel\n");
    let tail = format!("---\nname: {last}\nrun: echo\n");
    for i in 0.. {
        let task = format!(
            "---\nname: task-{i}\nnum_nodes: {}\nresources:\n  cpus: {}+\n  memory: {}GB\n\
             envs:\n  RANK: \"{i}\"\n  PEER: task-{}-0.${{SKYPILOT_JOBGROUP_NAME}}\n\
             run: |\n  echo start {i}\n  python step.py --id {i}\n",
            1 + i % 4,
            2 + i % 8,
            8 * (1 + i % 4),
            i.max(1) - 1,
        );
        if text.len() + task.len() + tail.len() > len {
            break;
        }
        text.push_str(&task);
    }
    text.push_str(&tail);
    text
}

/// A Job Group of `n` one-line tasks, then `extra`.
fn group_of_tasks(n: usize, extra: &str) -> String {
    let mut text = String::from("name: g\nexecution: parallel\n");
    for i in 0..n {
        let _ = write!(text, "---\nname: t{i}\nrun: x\n");
    }
    text.push_str(extra);
    assert!(text.len() <= MAX_FILE_BYTES, "{} bytes", text.len());
    text
}

/// Deterministic pseudo-random bytes (xorshift64*).
fn junk(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.max(1);
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_be_bytes()[0]
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Running the binary, measured.

fn os(s: &str) -> OsString {
    s.into()
}

/// A scratch directory for one case, removed when the case ends.
struct Case {
    name: &'static str,
    dir: PathBuf,
}

impl Case {
    fn new(name: &'static str) -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("hostile")
            .join(name);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Self { name, dir }
    }

    fn file(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.dir.join(name);
        fs::write(&path, contents).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        path
    }

    /// `skyc check --color never FILE`.
    fn check(&self, file: &Path) -> Outcome {
        self.run(
            &[os("check"), os("--color"), os("never"), file.into()],
            None,
        )
    }

    /// Runs skyc with `args` (and `stdin`), measuring wall time and peak RSS.
    fn run(&self, args: &[OsString], stdin: Option<Vec<u8>>) -> Outcome {
        let (out_path, err_path, rss_path) = (
            self.dir.join(".stdout"),
            self.dir.join(".stderr"),
            self.dir.join(".rss"),
        );
        let mut command = match gnu_time() {
            Some(time) => {
                let mut c = Command::new(time);
                c.args(["-f", "%M %U %S", "-o"])
                    .arg(&rss_path)
                    .arg(binary());
                c
            }
            None => Command::new(binary()),
        };
        command
            .args(args)
            .env_remove("NO_COLOR")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(File::create(&out_path).unwrap())
            .stderr(File::create(&err_path).unwrap());
        let start = Instant::now();
        let mut child = command.spawn().expect("spawn skyc");
        let writer = stdin.map(|bytes| {
            let mut pipe = child.stdin.take().unwrap();
            // skyc may stop reading (at the size limit): a broken pipe is
            // expected then.
            std::thread::spawn(move || drop(pipe.write_all(&bytes)))
        });
        let mut polled_kb = 0;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for skyc") {
                break status;
            }
            if gnu_time().is_none() {
                polled_kb = polled_kb.max(vm_hwm_kb(child.id()).unwrap_or(0));
            }
            if start.elapsed() > HANG {
                kill_tree(child.id());
                let _ = child.kill();
                let _ = child.wait();
                panic!("{}: skyc still running after {HANG:?}", self.name);
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let wall = start.elapsed();
        if let Some(w) = writer {
            w.join().unwrap();
        }
        // GNU time's last line: `KB USER SYS`.
        let timed = fs::read_to_string(&rss_path).unwrap_or_default();
        let fields: Vec<&str> = timed.lines().last().unwrap_or("").split(' ').collect();
        let (rss_kb, cpu) = match (gnu_time(), fields.as_slice()) {
            (Some(_), [kb, user, sys]) => (
                kb.parse().ok(),
                user.parse::<f64>()
                    .ok()
                    .zip(sys.parse::<f64>().ok())
                    .map(|(u, s)| Duration::from_secs_f64(u + s)),
            ),
            _ => ((polled_kb > 0).then_some(polled_kb), None),
        };
        let read =
            |p: &Path| String::from_utf8_lossy(&fs::read(p).unwrap_or_default()).into_owned();
        let input = args
            .iter()
            .rev()
            .find(|a| !a.to_string_lossy().starts_with("--"));
        let input = input.map_or_else(String::new, |a| {
            let p = Path::new(a);
            p.file_name().unwrap_or(a).to_string_lossy().into_owned()
        });
        Outcome {
            case: format!("{}/{input}", self.name),
            code: status.code(),
            stdout: read(&out_path),
            stderr: read(&err_path),
            wall,
            cpu,
            rss_kb,
        }
    }
}

impl Drop for Case {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

struct Outcome {
    /// `case/input`, for messages.
    case: String,
    /// `None` when killed by a signal.
    code: Option<i32>,
    stdout: String,
    stderr: String,
    wall: Duration,
    /// User plus system time, when GNU time measured it.
    cpu: Option<Duration>,
    rss_kb: Option<u64>,
}

impl Outcome {
    /// Exit `code`, no panic, bounded cost; prints the figures.
    fn assert_failed(&self, code: i32) {
        let rss = self.rss_kb.map_or_else(
            || "n/a".to_owned(),
            |kb| format!("{:.1} MB", kb as f64 / 1000.0),
        );
        let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
        eprintln!(
            "hostile {:<32} exit {:?}  wall {:>10}  cpu {:>10}  peak RSS {rss}",
            self.case,
            self.code,
            ms(self.wall),
            self.cpu.map_or_else(|| "n/a".to_owned(), ms),
        );
        assert!(
            !self.stderr.contains("panicked") && !self.stdout.contains("panicked"),
            "{}: skyc panicked:\n{}",
            self.case,
            head(&self.stderr)
        );
        assert_eq!(
            self.code,
            Some(code),
            "{}: exit status; stderr:\n{}",
            self.case,
            head(&self.stderr)
        );
        let (strict, rss_kb) = limits();
        let (what, took, bound) = match (strict, self.cpu) {
            (false, Some(cpu)) => ("CPU", cpu, DEBUG_CPU),
            (false, None) => ("wall", self.wall, DEBUG_CPU),
            (true, _) => ("wall", self.wall, TARGET_WALL),
        };
        assert!(
            took < bound,
            "{}: took {took:?} ({what}), more than {bound:?}",
            self.case
        );
        if let Some(kb) = self.rss_kb {
            assert!(
                kb < rss_kb,
                "{}: peak RSS {kb} KB, more than {rss_kb} KB",
                self.case
            );
        }
    }

    /// As [`Self::assert_failed`], with an error of `rule` reported.
    fn assert_error(&self, code: i32, rule: &str) {
        self.assert_failed(code);
        assert!(
            self.stderr.contains(&format!("error[{rule}]")),
            "{}: expected error[{rule}]:\n{}",
            self.case,
            head(&self.stderr)
        );
    }

    /// The human output points into the file: a `--> NAME...` line.
    fn assert_located(&self, name: &str) {
        let located = self.stderr.lines().any(|l| {
            l.trim_start()
                .strip_prefix("--> ")
                .is_some_and(|at| at.contains(name))
        });
        assert!(
            located,
            "{}: no `--> {name}` line:\n{}",
            self.case,
            head(&self.stderr)
        );
    }
}

/// The first lines of `s`, for failure messages.
fn head(s: &str) -> String {
    let mut lines: Vec<&str> = s.lines().take(40).collect();
    if s.lines().nth(40).is_some() {
        lines.push("...");
    }
    lines
        .iter()
        .map(|l| l.chars().take(200).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `SKYC_BIN` (e.g. `target/release/skyc`), else the binary Cargo built
/// for this test.
fn binary() -> OsString {
    std::env::var_os("SKYC_BIN").unwrap_or_else(|| support::skyc().get_program().to_owned())
}

/// Whether to assert the release targets (`SKYC_HOSTILE_STRICT=1`), and
/// the RSS bound in KB.
fn limits() -> (bool, u64) {
    if std::env::var_os("SKYC_HOSTILE_STRICT").is_some_and(|v| v != "0") {
        (true, TARGET_RSS_KB)
    } else {
        (false, DEBUG_RSS_KB)
    }
}

/// GNU time, if installed: it reports the child's `ru_maxrss` and CPU
/// times.
fn gnu_time() -> Option<&'static Path> {
    static TIME: OnceLock<Option<PathBuf>> = OnceLock::new();
    TIME.get_or_init(|| {
        let time = PathBuf::from("/usr/bin/time");
        let probe = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("hostile-time-probe-{}", std::process::id()));
        let ok = Command::new(&time)
            .args(["-f", "%M %U %S", "-o"])
            .arg(&probe)
            .arg("true")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
            && fs::read_to_string(&probe).is_ok_and(|s| {
                s.lines().last().is_some_and(|l| {
                    let fields: Vec<&str> = l.split(' ').collect();
                    fields.len() == 3 && fields[0].parse::<u64>().is_ok()
                })
            });
        let _ = fs::remove_file(&probe);
        ok.then_some(time)
    })
    .as_deref()
}

/// The high-water RSS of a running process, from `/proc`.
fn vm_hwm_kb(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Kills `pid`'s children (skyc under GNU time), by id.
fn kill_tree(pid: u32) {
    let children =
        fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    for child in children.split_whitespace() {
        let _ = Command::new("kill").args(["-KILL", child]).status();
    }
}
