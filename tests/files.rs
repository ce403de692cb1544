//! Code and data: `workdir` and local `file_mounts` reach every node as
//! they were when the group was submitted, each node in a view of its
//! own; the user's files and the machine's own paths are never written.
//! On this machine and on the real Slurm cluster scripts/test starts
//! (whose nodes are namespaces of this machine, so "the machine" is
//! checked there too).

use crate::slurm_e2e::cluster;
use crate::support;
use crate::support::scratch::{Scratch, kill_supervisor, task, text};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Copies a fixture tree into `to`, with the modes a checkout under
/// umask 022 gives (a digest covers them).
fn copy_tree(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt;
    fs::create_dir_all(to).expect("mkdir");
    fs::set_permissions(to, fs::Permissions::from_mode(0o755)).expect("chmod");
    for entry in fs::read_dir(from).expect("fixture") {
        let entry = entry.expect("entry");
        let dest = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            fs::copy(entry.path(), &dest).expect("copy");
            fs::set_permissions(&dest, fs::Permissions::from_mode(0o644)).expect("chmod");
        }
    }
}

/// Every file under `dir` with its bytes, sorted: what "untouched" means.
fn listing(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((path.clone(), fs::read(&path).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

/// Where a test runs its groups: this machine, or the Slurm cluster
/// (whose compute nodes see the cargo target directory, where its
/// scratch directories are).
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Target {
    Local,
    Slurm,
}

impl Target {
    pub(crate) fn scratch(self, name: &str) -> Scratch {
        match self {
            Target::Local => Scratch::new(name),
            Target::Slurm => Scratch::under(
                Path::new(env!("CARGO_TARGET_TMPDIR")),
                &format!("slurm-{name}"),
            ),
        }
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            Target::Local => &[],
            Target::Slurm => &["--target", "slurm"],
        }
    }

    pub(crate) fn run(self, s: &Scratch, file: &str) -> std::process::Command {
        let mut cmd = s.skyc(&["run", file]);
        cmd.args(self.args());
        cmd
    }

    fn detach(self, s: &Scratch, file: &str) -> i64 {
        let out = self.run(s, file).arg("-d").output().expect("run -d");
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().parse().expect("group id")
    }
}

/// Waits (10 s at most) until the ended groups' snapshots are removed.
fn no_snapshots_left(s: &Scratch) {
    let start = std::time::Instant::now();
    while !snapshots(s).is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(snapshots(s), Vec::<String>::new());
}

/// One of SkyPilot's examples (`tests/fixtures/skypilot-examples/FILE`)
/// for a machine without network access or GPUs: no `setup` (its `pip
/// install`s), `python3`, the lines holding any of `drop` left out, and
/// `replace` applied.
fn offline(file: &str, drop: &[&str], replace: &[(&str, &str)]) -> String {
    let example = fs::read_to_string(
        support::root()
            .join("tests/fixtures/skypilot-examples")
            .join(file),
    )
    .expect("example");
    let mut yaml = String::new();
    let mut in_setup = false;
    for line in example.lines() {
        if line.starts_with("setup:") {
            in_setup = true;
            continue;
        }
        if in_setup && line.starts_with("  ") {
            continue;
        }
        in_setup = false;
        if drop.iter().any(|d| line.contains(d)) {
            continue;
        }
        let mut line = line.replace("python ", "python3 ");
        for (from, to) in replace {
            line = line.replace(from, to);
        }
        yaml.push_str(&line);
        yaml.push('\n');
    }
    yaml
}

/// The state directory's snapshots.
fn snapshots(s: &Scratch) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(s.state().join("files"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// SkyPilot's RLHF Job Group example (its CPU variant), run from the
/// root of a repository holding its `code/` folder, as its users run it:
/// every server reads its code from `/code`, the data server its prompts,
/// and the client reaches them all by group hostname. Changed for a
/// machine without network access: no `pip install` (the fixture's
/// servers use Python's standard library), `python3`, shorter sleeps.
#[test]
fn the_rlhf_example_runs_with_its_code() {
    rlhf(Target::Local);
}

#[test]
fn the_rlhf_example_runs_with_its_code_on_slurm() {
    let Some(_cluster) = cluster() else { return };
    rlhf(Target::Slurm);
}

fn rlhf(target: Target) {
    let s = target.scratch("files-rlhf");
    copy_tree(&support::root().join("tests/fixtures/files/rlhf"), &s.dir);
    let yaml = offline(
        "rl-post-training-jobgroup__rlhf-math-jobgroup-cpu.yaml",
        &[],
        &[
            ("sleep 300", "true"),
            ("sleep 30", "sleep 1"),
            ("sleep 5", "sleep 1"),
        ],
    );
    s.write("rlhf-math-jobgroup-cpu.yaml", &yaml);
    let out = target
        .run(&s, "rlhf-math-jobgroup-cpu.yaml")
        .env("SKYC_LOCAL_CPUS", "16")
        .env("SKYC_LOCAL_MEMORY_GB", "64")
        .output()
        .expect("run");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for line in [
        "(test-client-0) Data server is healthy!",
        "(test-client-0) Reward server is healthy!",
        "(test-client-0) Replay buffer is healthy!",
        // The bytes the data server read from /code/prompts.jsonl.
        r#"(test-client-0) Prompts: {"prompts": [{"prompt": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?", "answer": "72"}, {"prompt": "Weng earns $12 an hour for babysitting."#,
        r#"(test-client-0) Reward response: {"reward": 1.0}"#,
        r#"(test-client-0) Stats: {"size": 1}"#,
        "(test-client-0) All services are working correctly!",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in\n{stdout}");
    }
    assert!(
        !Path::new("/code").exists(),
        "/code was made on the machine"
    );
}

/// A task's workdir and file mounts: where SkyPilot puts them, each node
/// writing over its own view only.
const VIEWS: &str = r#"name: views
execution: parallel
---
name: a
num_nodes: 2
workdir: src
file_mounts:
  /opt/skyc-test/code: src
  ~/settings.txt: src/conf/settings.txt
setup: |
  set -e
  echo "made by setup" > made-by-setup.txt
  mkdir -p ~/.venv-test /opt/skyc-test/code/.cache
  echo "venv of $SKYPILOT_SETUP_NODE_RANK" > ~/.venv-test/ok
run: |
  set -e
  echo "setup left $(cat made-by-setup.txt) and $(cat ~/.venv-test/ok)"
  ls -d /opt/skyc-test/code/.cache
  echo "cwd $(pwd)"
  echo "workdir $(cat main.txt)"
  echo "mounted $(cat /opt/skyc-test/code/main.txt)"
  echo "file $(cat ~/settings.txt)"
  echo "home $(cat ~/sky_workdir/main.txt)"
  echo "ignored $(ls /opt/skyc-test/code/ | tr '\n' ' ')"
  echo "node $SKYPILOT_NODE_RANK wrote" >> main.txt
  echo "node $SKYPILOT_NODE_RANK wrote" >> /opt/skyc-test/code/main.txt
  echo "fresh ~/new-$SKYPILOT_NODE_RANK" > ~/new-$SKYPILOT_NODE_RANK
  echo "lines $SKYPILOT_NODE_RANK $(wc -l < main.txt) $(wc -l < /opt/skyc-test/code/main.txt)"
  readlink link.txt
  cat link.txt
"#;

#[test]
fn every_node_sees_its_files_and_the_machine_is_untouched() {
    views(Target::Local);
}

#[test]
fn every_node_sees_its_files_and_the_machine_is_untouched_on_slurm() {
    let Some(_cluster) = cluster() else { return };
    views(Target::Slurm);
}

fn views(target: Target) {
    let s = target.scratch("files-views");
    let src = s.dir.join("src");
    fs::create_dir_all(src.join("conf")).expect("mkdir");
    fs::create_dir_all(src.join("build")).expect("mkdir");
    fs::write(src.join("main.txt"), "v1\n").expect("write");
    fs::write(src.join("conf/settings.txt"), "debug=1\n").expect("write");
    fs::write(src.join("build/out.bin"), "artifact").expect("write");
    fs::write(src.join(".gitignore"), "build/\n*.log\n").expect("write");
    fs::write(src.join("run.log"), "noise").expect("write");
    std::os::unix::fs::symlink("conf/settings.txt", src.join("link.txt")).expect("link");
    let home = s.dir.join("home");
    fs::create_dir_all(&home).expect("home");
    fs::write(home.join("mine.txt"), "the user's").expect("write");
    s.write("g.yaml", VIEWS);
    let before = (listing(&src), listing(&home));
    let out = target
        .run(&s, "g.yaml")
        .env("HOME", &home)
        .output()
        .expect("run");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for rank in 0..2 {
        for line in [
            format!("(a-{rank}) cwd {}/sky_workdir", home.display()),
            // What setup made in the workdir and the home is there for run.
            format!("(a-{rank}) setup left made by setup and venv of {rank}"),
            format!("(a-{rank}) workdir v1"),
            format!("(a-{rank}) mounted v1"),
            format!("(a-{rank}) file debug=1"),
            format!("(a-{rank}) home v1"),
            // `.gitignore`'s entries are not sent; the file itself is.
            format!("(a-{rank}) ignored conf link.txt main.txt "),
            // Each node writes over its own view: one line of its own.
            format!("(a-{rank}) lines {rank} 2 2"),
            format!("(a-{rank}) conf/settings.txt"),
            format!("(a-{rank}) debug=1"),
        ] {
            assert!(stdout.contains(&line), "missing {line:?} in\n{stdout}");
        }
    }
    assert_eq!(
        (listing(&src), listing(&home)),
        before,
        "the user's files changed"
    );
    assert!(!Path::new("/opt/skyc-test").exists(), "/opt was written");
    // The group has ended: what it alone was given is gone.
    no_snapshots_left(&s);
    // And the nodes' writable layers with it.
    let layers: Vec<PathBuf> = listing(&s.state().join("groups"))
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p.to_string_lossy().contains("-files/"))
        .collect();
    assert_eq!(layers, Vec::<PathBuf>::new());
}

/// A recovery, after a supervisor that was killed and the source edited
/// since the submission, runs the submitted bytes, and a restarted node
/// does not see what its previous attempt wrote.
#[test]
fn a_recovery_runs_the_submitted_bytes() {
    recovery(Target::Local);
}

#[test]
fn a_recovery_runs_the_submitted_bytes_on_slurm() {
    let Some(_cluster) = cluster() else { return };
    recovery(Target::Slurm);
}

fn recovery(target: Target) {
    let s = target.scratch("files-recovery");
    let src = s.dir.join("src");
    fs::create_dir_all(&src).expect("mkdir");
    fs::write(src.join("data.txt"), "submitted\n").expect("write");
    s.write(
        "g.yaml",
        r#"name: rec
workdir: src
resources:
  job_recovery:
    max_restarts_on_errors: 1
run: |
  echo "attempt reads $(cat data.txt)" >> "$SCRATCH/seen"
  echo scribbled >> data.txt
  echo "lines $(wc -l < data.txt)" >> "$SCRATCH/seen"
  if [ ! -e "$SCRATCH/failed-once" ]; then
    touch "$SCRATCH/failed-once"
    while [ ! -e "$SCRATCH/edited" ]; do sleep 0.05; done
    exit 1
  fi
"#,
    );
    let id = target.detach(&s, "g.yaml");
    let status = s.wait_for(id, Duration::from_secs(60), |_| {
        s.dir.join("failed-once").exists()
    });
    // The supervisor dies; the user edits the source; the attempt fails.
    kill_supervisor(&status);
    fs::write(src.join("data.txt"), "edited after submission\n").expect("edit");
    fs::write(s.dir.join("edited"), "").expect("touch");
    let status = s.wait_finished(id);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert_eq!(task(&status, "rec")["restarts_on_errors"], 1, "{status:#}");
    assert_eq!(
        s.read("seen"),
        "attempt reads submitted\nlines 2\nattempt reads submitted\nlines 2\n"
    );
}

/// A snapshot lives while a live group is given it: two groups sharing
/// one source share one snapshot, kept until the second ends.
#[test]
fn a_snapshot_goes_when_its_last_group_goes() {
    let s = Scratch::new("files-lifetime");
    fs::create_dir_all(s.dir.join("src")).expect("mkdir");
    fs::write(s.dir.join("src/a.txt"), "a").expect("write");
    let wait = |name: &str| {
        format!(
            "name: {name}\nworkdir: src\nrun: |\n  cat a.txt\n  while [ ! -e \"$SCRATCH/{name}.go\" ]; do sleep 0.05; done\n"
        )
    };
    s.write("one.yaml", &wait("one"));
    s.write("two.yaml", &wait("two"));
    let one = s.detach("one.yaml");
    let two = s.detach("two.yaml");
    assert_eq!(snapshots(&s).len(), 1, "one source, one snapshot");
    fs::write(s.dir.join("one.go"), "").expect("go");
    s.wait_finished(one);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(snapshots(&s).len(), 1, "kept for the live group");
    fs::write(s.dir.join("two.go"), "").expect("go");
    s.wait_finished(two);
    no_snapshots_left(&s);
}

/// A pool's workdir reaches its workers before their setup, and the jobs
/// run on them start in it.
#[test]
fn a_pools_files_reach_its_workers_and_their_jobs() {
    pool(Target::Local);
}

#[test]
fn a_pools_files_reach_its_workers_and_their_jobs_on_slurm() {
    let Some(_cluster) = cluster() else { return };
    pool(Target::Slurm);
}

fn pool(target: Target) {
    let s = target.scratch("files-pool");
    fs::create_dir_all(s.dir.join("src")).expect("mkdir");
    fs::write(s.dir.join("src/model.txt"), "weights-v1\n").expect("write");
    s.write(
        "pool.yaml",
        "pool:\n  workers: 1\nworkdir: src\nsetup: |\n  echo \"setup sees $(cat model.txt)\" > \"$SCRATCH/setup\"\n",
    );
    s.write(
        "job.yaml",
        "name: job\nrun: |\n  echo \"job sees $(cat model.txt) in $(basename $(pwd))\"\n",
    );
    let out = s
        .skyc(&["pool", "apply", "-p", "fp", "pool.yaml"])
        .args(target.args())
        .output()
        .expect("apply");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = s
        .skyc(&["run", "--pool", "fp", "job.yaml"])
        .output()
        .expect("run");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("job sees weights-v1 in sky_workdir"),
        "{stdout}"
    );
    assert_eq!(s.read("setup"), "setup sees weights-v1\n");
}

/// What cannot be sent is refused before anything starts, at the value
/// that names it.
#[test]
fn sources_that_cannot_be_sent_are_located_errors() {
    let s = Scratch::new("files-errors");
    let src = s.dir.join("src");
    fs::create_dir_all(src.join("sub")).expect("mkdir");
    fs::write(src.join("big.txt"), vec![b'x'; 3 * 1024 * 1024]).expect("write");
    s.write("plain.txt", "not a directory");
    let cases: &[(&str, &str)] = &[
        ("missing", "name: t\nworkdir: nowhere\nrun: echo\n"),
        (
            "not_a_directory",
            "name: t\nworkdir: plain.txt\nrun: echo\n",
        ),
        (
            "missing_mount",
            "name: t\nfile_mounts:\n  /code: ./missing/code\nrun: echo\n",
        ),
        (
            "link_leaves",
            "name: t\nfile_mounts:\n  /code: src\nrun: echo\n",
        ),
        ("fifo", "name: t\nfile_mounts:\n  /data: src\nrun: echo\n"),
        ("too_large", "name: t\nworkdir: src\nrun: echo\n"),
    ];
    for (name, yaml) in cases {
        match *name {
            "link_leaves" => {
                std::os::unix::fs::symlink("../../plain.txt", src.join("sub/up")).expect("link");
            }
            "fifo" => {
                let _ = fs::remove_file(src.join("sub/up"));
                let made = std::process::Command::new("mkfifo")
                    .arg(src.join("sub/pipe"))
                    .status()
                    .expect("mkfifo");
                assert!(made.success());
            }
            "too_large" => {
                let _ = fs::remove_file(src.join("sub/pipe"));
            }
            _ => {}
        }
        s.write("g.yaml", yaml);
        let mut run = s.skyc(&["run", "g.yaml"]);
        if *name == "too_large" {
            run.env("SKYC_FILES_LIMIT_MB", "2");
        }
        let out = run.output().expect("run");
        assert_eq!(out.status.code(), Some(1), "{name}: {}", text(&out.stderr));
        let stderr = text(&out.stderr).replace(&s.dir.display().to_string(), "[scratch]");
        support::snapshots("local/files").bind(|| insta::assert_snapshot!(*name, stderr));
    }
    // Files read well, then the plan refused: what was read is removed.
    s.write(
        "g.yaml",
        "name: t\nworkdir: src\nresources:\n  cpus: 100000\nrun: echo\n",
    );
    let out = s.skyc(&["run", "g.yaml"]).output().expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("exceeds-local-capacity"),
        "{}",
        text(&out.stderr)
    );
    // Nothing was started, and nothing half-taken is left.
    assert!(
        !s.state().join("groups").exists()
            || fs::read_dir(s.state().join("groups"))
                .map(|d| d.count())
                .unwrap_or(0)
                == 0
    );
    assert_eq!(snapshots(&s), Vec::<String>::new());
}

/// `build --target files`: what a run would send, per task, for review;
/// SkyPilot's RLHF example (GPUs, a policy bucket) from its repository's
/// root.
#[test]
fn build_lists_each_tasks_files() {
    let s = Scratch::new("files-build");
    copy_tree(&support::root().join("tests/fixtures/files/rlhf"), &s.dir);
    fs::copy(
        support::root().join(
            "tests/fixtures/skypilot-examples/rl-post-training-jobgroup__rlhf-math-jobgroup.yaml",
        ),
        s.dir.join("rlhf.yaml"),
    )
    .expect("example");
    let build = |extra: &[&str]| {
        support::skyc()
            .args(["build", "rlhf.yaml", "--target", "files"])
            .args(extra)
            .current_dir(&s.dir)
            .output()
            .expect("build")
    };
    let out = build(&[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let yaml = text(&out.stdout).replace(&s.dir.display().to_string(), "[repo]");
    support::snapshots("local/files").bind(|| insta::assert_snapshot!("build_rlhf", yaml));
    // The JSON form carries the same.
    let out = build(&["-o", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let trainer = &json["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .find(|t| t["task"] == "ppo-trainer")
        .expect("trainer")["mounts"][0];
    assert_eq!(trainer["destination"], "/code");
    assert_eq!(trainer["files"], 5);
}

/// SkyPilot's train–eval example: a trainer and an evaluator sharing a
/// volume made beforehand with `skyc volume apply` from the example's own
/// volume file, both running their code from `/code`. Changed for these
/// machines: no `pip install`, `python3`, no GPU or memory asked.
#[test]
fn the_train_eval_example_shares_its_volume() {
    train_eval(Target::Local);
}

#[test]
fn the_train_eval_example_shares_its_volume_on_slurm() {
    let Some(_cluster) = cluster() else { return };
    train_eval(Target::Slurm);
}

fn train_eval(target: Target) {
    let s = target.scratch("files-train-eval");
    copy_tree(
        &support::root().join("tests/fixtures/files/train-eval"),
        &s.dir,
    );
    let examples = support::root().join("tests/fixtures/skypilot-examples");
    fs::copy(
        examples.join("train-eval-jobgroup__train-eval-ckpts-volume.yaml"),
        s.dir.join("train-eval-ckpts-volume.yaml"),
    )
    .expect("volume file");
    let yaml = offline(
        "train-eval-jobgroup__train-eval-jobgroup.yaml",
        &["accelerators:", "memory:"],
        &[],
    );
    s.write("train-eval-jobgroup.yaml", &yaml);
    // Before the volume exists: a located error, nothing started.
    let out = target
        .run(&s, "train-eval-jobgroup.yaml")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr).replace(&s.dir.display().to_string(), "[scratch]");
    if target == Target::Local {
        support::snapshots("local/files")
            .bind(|| insta::assert_snapshot!("unknown_volume", stderr));
    }
    let mut apply = s.skyc(&["volume", "apply", "train-eval-ckpts-volume.yaml"]);
    apply.args(target.args());
    let out = apply.output().expect("volume apply");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = target
        .run(&s, "train-eval-jobgroup.yaml")
        .output()
        .expect("run");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for epoch in [2, 4, 6, 8, 10] {
        let line =
            format!("evaluated checkpoint_epoch_{epoch}.json: model resnet18-cifar10 accuracy");
        assert!(stdout.contains(&line), "missing {line:?} in\n{stdout}");
    }
    assert!(
        stdout.contains("(evaluator-0) evaluation complete: 5 checkpoints"),
        "{stdout}"
    );
    // What the trainer wrote outlives the group, in the volume.
    let kept = s.state().join("volumes/train-eval-ckpts");
    assert!(kept.join("checkpoint_epoch_10.json").is_file());
    assert!(kept.join("training_complete").is_file());
    assert!(
        !Path::new("/checkpoints").exists(),
        "/checkpoints was made on the machine"
    );
}

/// `skyc volume apply`, `ls` and `delete`: refused while a live group
/// mounts the volume, and what a volume file gets wrong is located.
#[test]
fn volumes_are_made_listed_and_deleted() {
    let s = Scratch::new("files-volumes");
    let ls = |s: &Scratch| -> serde_json::Value {
        let out = s.skyc(&["volume", "ls", "--json"]).output().expect("ls");
        serde_json::from_slice(&out.stdout).expect("json")
    };
    assert_eq!(ls(&s), serde_json::json!([]));
    let out = s
        .skyc(&["volume", "apply", "--name", "data", "--size", "500Mi"])
        .output()
        .expect("apply");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed = ls(&s);
    assert_eq!(listed[0]["name"], "data");
    assert_eq!(listed[0]["target"], "local");
    assert_eq!(listed[0]["size_gb"], 1);
    // Applied again: kept, whatever it holds.
    fs::write(s.state().join("volumes/data/kept"), "x").expect("write");
    let out = s
        .skyc(&["volume", "apply", "--name", "data", "--size", "1Gi"])
        .output()
        .expect("apply");
    assert!(out.status.success());
    assert!(
        text(&out.stderr).contains("exists on local"),
        "{}",
        text(&out.stderr)
    );
    assert!(s.state().join("volumes/data/kept").is_file());
    // In use: refused.
    s.write(
        "g.yaml",
        "name: user\nvolumes:\n  /data: data\nrun: |\n  cat /data/kept\n  while [ ! -e \"$SCRATCH/go\" ]; do sleep 0.05; done\n",
    );
    let id = s.detach("g.yaml");
    let out = s
        .skyc(&["volume", "delete", "data"])
        .output()
        .expect("delete");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("mounted by live groups: {id} (user)")),
        "{}",
        text(&out.stderr)
    );
    fs::write(s.dir.join("go"), "").expect("go");
    assert_eq!(s.wait_finished(id)["status"], "SUCCEEDED");
    let out = s
        .skyc(&["volume", "delete", "data"])
        .output()
        .expect("delete");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!s.state().join("volumes/data").exists());
    assert_eq!(ls(&s), serde_json::json!([]));
    let out = s
        .skyc(&["volume", "delete", "data"])
        .output()
        .expect("delete");
    assert_eq!(out.status.code(), Some(102));
    // A volume file's mistakes, at their place.
    s.write("bad.yaml", "name: ckpts\ntyp: k8s-pvc\nsize: 10Gx\n");
    let out = s
        .skyc(&["volume", "apply", "bad.yaml", "--color", "never"])
        .output()
        .expect("apply");
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    support::snapshots("local/files").bind(|| insta::assert_snapshot!("bad_volume_file", stderr));
    s.write("nosize.yaml", "name: ckpts\ntype: k8s-pvc\n");
    let out = s
        .skyc(&["volume", "apply", "nosize.yaml", "--color", "never"])
        .output()
        .expect("apply");
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    support::snapshots("local/files")
        .bind(|| insta::assert_snapshot!("volume_without_size", stderr));
}
