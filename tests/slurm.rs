//! The Slurm target without a cluster: snapshots of the scripts for
//! SkyPilot's examples, shellcheck on every emitted script, and a hostile
//! corpus whose values must come out of the script's quoting byte for byte.
//! The end-to-end tests on a real cluster are in `slurm_e2e.rs`.

use crate::examples::{accepted_examples, example_texts};
use crate::support::{render_human, root, skyc, snapshots, yaml_files};
use skyc_compiler::ir::{Execution, Group};
use skyc_compiler::{Options, compile};
use skyc_targets::slurm::{self, STEP, SUPERVISOR_MARKER};
use std::path::{Path, PathBuf};
use std::process::Command;

fn build(group: &skyc_compiler::ir::Group) -> String {
    let options = slurm::Options {
        grace_secs: 30,
        ..Default::default()
    };
    let built = slurm::build(group, &options);
    built
        .script
        .unwrap_or_else(|| panic!("{:?}", built.diagnostics))
}

/// The group's own part of a script (everything before the lifecycle,
/// which is the same for every group and snapshotted once).
fn group_part(script: &str) -> &str {
    &script[..script.find(SUPERVISOR_MARKER).unwrap()]
}

fn build_pipeline(group: &Group) -> slurm::Pipeline {
    let built = slurm::pipeline(
        group,
        &slurm::Options {
            grace_secs: 30,
            ..Default::default()
        },
    );
    built
        .pipeline
        .unwrap_or_else(|| panic!("{:?}", built.diagnostics))
}

/// Pipelines written for the Slurm target's tests: (file stem, IR).
pub(crate) fn pipeline_fixtures() -> Vec<(String, Group)> {
    let files = yaml_files(&root().join("tests/fixtures/pipelines"));
    assert!(files.len() >= 4);
    files
        .iter()
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(path).unwrap();
            let c = compile(&name, text.as_bytes(), &Options::default());
            let group = c
                .group
                .unwrap_or_else(|| panic!("{name}: {:?}", c.diagnostics));
            assert_eq!(group.execution, Execution::Serial, "{name}");
            (name.trim_end_matches(".yaml").to_owned(), group)
        })
        .collect()
}

/// A pipeline snapshot: the diagnostics as `skyc build` shows them, the
/// `--out DIR` form's `submit.sh`, and each step's own part (the lifecycle
/// is the group's, snapshotted once).
fn pipeline_snapshot(file: &str, text: &str) -> String {
    let mut c = compile(file, text.as_bytes(), &Options::default());
    let group = c.group.clone().unwrap();
    let options = slurm::Options {
        grace_secs: 30,
        ..Default::default()
    };
    let built = slurm::pipeline(&group, &options);
    c.diagnostics.extend(built.diagnostics);
    c.diagnostics
        .sort_by_key(|d| (d.primary.span.start, d.primary.span.end, d.rule));
    let pipeline = built
        .pipeline
        .unwrap_or_else(|| panic!("{file}: {}", render_human(&c)));
    let mut snap = render_human(&c);
    for (name, text) in pipeline.files() {
        let part = text
            .find(SUPERVISOR_MARKER)
            .map_or(&text[..], |end| &text[..end]);
        snap.push_str(&format!("==> {name} <==\n{part}"));
    }
    snap
}

/// The hostile group as a pipeline: its two tasks are two steps.
fn hostile_pipeline() -> Group {
    let yaml = hostile_yaml().replacen("execution: parallel\n", "", 1);
    let c = compile("hostile.yaml", yaml.as_bytes(), &Options::default());
    let group = c.group.unwrap_or_else(|| panic!("{:?}", c.diagnostics));
    assert_eq!(group.execution, Execution::Serial);
    group
}

#[test]
fn jobs_of_every_pipeline_fixture() {
    snapshots("slurm").bind(|| {
        for path in yaml_files(&root().join("tests/fixtures/pipelines")) {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            insta::assert_snapshot!(
                format!("pipeline-{}", name.trim_end_matches(".yaml")),
                pipeline_snapshot(&name, &text)
            );
        }
    });
}

/// What a fake sbatch saw, call by call: its arguments, the script on its
/// standard input, `SKYC_OUT`, `SKYC_PIPELINE_JOB` and its directory.
struct Submitted {
    args: Vec<String>,
    script: String,
    out: String,
    pipeline_job: String,
    cwd: PathBuf,
}

/// `bin/sbatch` and `bin/scancel` that record each call in `dir`; sbatch
/// prints a chatty line, then `ID;CLUSTER` with ids from 41, and refuses
/// its call number $FAKE_FAIL_AT.
fn fake_slurm(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let sbatch = r#"#!/bin/bash
set -eu
d=$FAKE_DIR
n=$(($(cat "$d/count" 2>/dev/null || echo 0) + 1))
echo "$n" >"$d/count"
if [ "$n" = "${FAKE_FAIL_AT:-0}" ]; then
    echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2
    exit 1
fi
cat >"$d/script.$n"
printf '%s\n' "$@" >"$d/args.$n"
printf '%s\n' "${SKYC_OUT-(unset)}" "${SKYC_PIPELINE_JOB-(unset)}" "$(pwd -P)" >"$d/env.$n"
echo "sbatch: a site wrapper says hello"
echo "$((40 + n));cluster"
"#;
    let scancel = "#!/bin/bash\nprintf '%s\\n' \"$@\" >>\"$FAKE_DIR/scancel\"\n";
    for (name, text) in [("sbatch", sbatch), ("scancel", scancel)] {
        let path = bin.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// Runs `bash script` in `cwd` with the fake sbatch first on PATH.
fn run_submit(
    script: &Path,
    cwd: &Path,
    fake: &Path,
    env: &[(&str, &str)],
) -> (std::process::Output, Vec<Submitted>) {
    let _ = std::fs::remove_dir_all(fake.join("calls"));
    std::fs::create_dir_all(fake.join("calls")).unwrap();
    let path = format!(
        "{}:{}",
        fake.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg(script)
        .current_dir(cwd)
        .env("PATH", path)
        .env("FAKE_DIR", fake.join("calls"))
        .env_remove("SKYC_OUT")
        .env_remove("SKYC_PIPELINE_JOB")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let calls = fake.join("calls");
    let mut submitted = Vec::new();
    for n in 1.. {
        let Ok(script) = std::fs::read_to_string(calls.join(format!("script.{n}"))) else {
            break;
        };
        let read = |f: &str| std::fs::read_to_string(calls.join(format!("{f}.{n}"))).unwrap();
        let args = read("args").lines().map(str::to_owned).collect();
        let env = read("env");
        let env: Vec<&str> = env.lines().collect();
        submitted.push(Submitted {
            args,
            script,
            out: env[0].to_owned(),
            pipeline_job: env[1].to_owned(),
            cwd: PathBuf::from(env[2]),
        });
    }
    (out, submitted)
}

#[test]
fn submit_scripts_hand_each_step_to_sbatch_byte_for_byte_in_order() {
    let dir = tmp_dir("submit");
    let fake = dir.join("fake");
    fake_slurm(&fake);
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let work = work.canonicalize().unwrap();
    let fixtures = pipeline_fixtures();
    let three = &fixtures.iter().find(|(n, _)| n == "three-steps").unwrap().1;
    for (name, group) in [("hostile", &hostile_pipeline()), ("three", three)] {
        let pipeline = build_pipeline(group);
        // Both forms: one self-contained file, and --out DIR's submit.sh,
        // run from another directory.
        let inline = dir.join(format!("{name}.submit.sh"));
        std::fs::write(&inline, pipeline.submit_script()).unwrap();
        let files = dir.join(format!("{name}.d"));
        std::fs::create_dir_all(&files).unwrap();
        for (file, text) in pipeline.files() {
            std::fs::write(files.join(file), text).unwrap();
        }
        for script in [inline, files.join("submit.sh")] {
            let (out, calls) = run_submit(&script, &work, &fake, &[]);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let n = pipeline.steps.len();
            assert_eq!(calls.len(), n);
            let want: String = pipeline
                .steps
                .iter()
                .enumerate()
                .map(|(i, s)| format!("{} {}\n", s.name, 41 + i))
                .collect();
            assert_eq!(stdout, want, "`STEP JOBID` per step");
            for (i, (call, step)) in calls.iter().zip(&pipeline.steps).enumerate() {
                assert!(
                    call.script == step.script,
                    "{name} step {i}: script changed"
                );
                let mut args = vec!["--parsable".to_owned()];
                if let Some(after) = step.after {
                    args.push(slurm::StepJob::dependency(&(41 + after).to_string()));
                }
                assert_eq!(call.args, args, "{name} step {i}");
                assert_eq!(call.out, "(unset)", "the job picks its own default");
                let first = if i == 0 { "" } else { "41" };
                assert_eq!(call.pipeline_job, first, "{name} step {i}");
                assert_eq!(call.cwd, work, "the jobs start where the script is run");
            }
        }
    }
    // SKYC_OUT=DIR: each step writes DIR/STEP.
    let pipeline = build_pipeline(three);
    let script = dir.join("three.submit.sh");
    let (out, calls) = run_submit(&script, &work, &fake, &[("SKYC_OUT", "/shared/out")]);
    assert!(out.status.success());
    let outs: Vec<&str> = calls.iter().map(|c| c.out.as_str()).collect();
    assert_eq!(
        outs,
        [
            "/shared/out/extract",
            "/shared/out/transform",
            "/shared/out/load"
        ]
    );
    // A step sbatch refuses: nothing after it is submitted, the steps
    // before it are cancelled, and the script fails.
    let (out, calls) = run_submit(&script, &work, &fake, &[("FAKE_FAIL_AT", "3")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(calls.len(), 2);
    assert_eq!(
        std::fs::read_to_string(fake.join("calls/scancel")).unwrap(),
        "41\n42\n"
    );
    assert!(
        stderr.contains("Invalid partition"),
        "sbatch's own words: {stderr}"
    );
    assert!(stderr.contains("step load was not submitted"), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "extract 41\ntransform 42\n"
    );
    assert_eq!(pipeline.steps.len(), 3);
}

/// Whether `tool` runs; when it does not, fail under scripts/test
/// (SKYC_SLURM_REQUIRED=1), else say loudly that the test is skipped.
pub(crate) fn have(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("SKYC_SLURM_REQUIRED").is_none(),
            "{tool} is required (SKYC_SLURM_REQUIRED is set) but does not run"
        );
        eprintln!("!!! SKIPPED: {tool} is not installed; scripts/test installs it");
    }
    ok
}

pub(crate) fn tmp_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("slurm")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn shellcheck(path: &Path) {
    let out = Command::new("shellcheck")
        .args(["-s", "bash"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "shellcheck {}:\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn script_of_every_accepted_example() {
    let settings = snapshots("slurm");
    settings.bind(|| {
        let examples = example_texts();
        assert!(examples.len() > 20);
        for (file, text) in &examples {
            // The diagnostics as `skyc build` shows them, then the script.
            let mut c = compile(file, text.as_bytes(), &Options::default());
            let Some(group) = c.group.clone() else {
                panic!("{file}: {}", render_human(&c));
            };
            let built = slurm::build(
                &group,
                &slurm::Options {
                    grace_secs: 30,
                    ..Default::default()
                },
            );
            c.diagnostics.extend(built.diagnostics);
            c.diagnostics
                .sort_by_key(|d| (d.primary.span.start, d.primary.span.end, d.rule));
            let snap = match built.script {
                Some(script) => render_human(&c) + group_part(&script),
                // A pipeline: its jobs instead (`build` refuses it).
                None if group.execution == Execution::Serial => pipeline_snapshot(file, text),
                None => panic!("{file}: {}", render_human(&c)),
            };
            insta::assert_snapshot!(file.trim_end_matches(".yaml").to_owned(), snap);
        }
        let text = std::fs::read_to_string(root().join("examples/train-eval.yaml")).unwrap();
        let group = compile("train-eval.yaml", text.as_bytes(), &Options::default())
            .group
            .unwrap();
        insta::assert_snapshot!("train-eval.full", build(&group));
    });
}

#[test]
fn shellcheck_passes_on_every_emitted_script() {
    if !have("shellcheck") {
        return;
    }
    let dir = tmp_dir("shellcheck");
    let step = dir.join("step.sh");
    std::fs::write(&step, STEP).unwrap();
    shellcheck(&step);
    let mut scripts: Vec<(String, String)> = accepted_examples()
        .iter()
        .filter(|(_, g)| g.execution == Execution::Parallel)
        .map(|(n, g)| (n.clone(), build(g)))
        .collect();
    let hostile = compile(
        "hostile.yaml",
        hostile_yaml().as_bytes(),
        &Options::default(),
    );
    scripts.push(("hostile".into(), build(hostile.group.as_ref().unwrap())));
    // Pipelines: the submit script in both forms, and every step's job.
    let mut pipelines: Vec<(String, Group)> = accepted_examples()
        .into_iter()
        .filter(|(_, g)| g.execution == Execution::Serial)
        .chain(pipeline_fixtures())
        .collect();
    assert!(pipelines.len() > 4);
    pipelines.push(("hostile-pipeline".into(), hostile_pipeline()));
    for (name, group) in &pipelines {
        let pipeline = build_pipeline(group);
        scripts.push((format!("{name}.submit"), pipeline.submit_script()));
        for (file, text) in pipeline.files() {
            scripts.push((format!("{name}.{file}"), text));
        }
    }
    for (name, script) in scripts {
        let path = dir.join(format!("{name}.sh"));
        std::fs::write(&path, script).unwrap();
        shellcheck(&path);
    }
}

/// Values built to escape quoting: quotes of both kinds, `$()`, backticks,
/// `${}`, backslashes, newlines, `#SBATCH` and `hetjob` look-alikes,
/// non-ASCII, and a CANARY file that must never be created.
pub(crate) fn hostile_values() -> Vec<String> {
    [
        "it's",
        "'; touch \"$SKYC_CANARY\"; '",
        "\"; touch \"$SKYC_CANARY\"; \"",
        "$(touch \"$SKYC_CANARY\")",
        "`touch \"$SKYC_CANARY\"`",
        "${SKYC_CANARY:?boom} $HOME ~ * ?",
        "back\\slash \\' \\\" \\n",
        "line one\n#SBATCH --nodes=99\n#SBATCH hetjob\nline four",
        "\n\nleading and trailing newlines\n\n",
        "tab\there; semi; & amp | pipe > gt < lt",
        "'\\''",
        "$'\\x41' \"$'x'\" %s %n",
        "ünïcødé ✓ 🚀",
        "",
        "-n",
        "!! !$ history",
        "cr\r\nesc\x1b[31m bell\x07 del\x7f c1\u{85}",
        "two\n\n\nblank lines",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// A run text that is valid bash, writes its hostile lines verbatim, and
/// must not create the canary.
pub(crate) const HOSTILE_RUN_BODY: &str = "# #SBATCH --nodes=99\n\
    : '$(touch \"$SKYC_CANARY\")' \"\\$(touch \"$SKYC_CANARY\")\"\n\
    cat >\"$SKYC_HOSTILE_OUT/heredoc\" <<'SKYC_EOF'\n\
    $(touch \"$SKYC_CANARY\") `touch \"$SKYC_CANARY\"` it's \"x\" \\ #SBATCH --mem=1\n\
    SKYC_EOF\n";

/// `s` as a YAML double-quoted scalar (JSON's escapes, plus the controls
/// JSON leaves raw and YAML refuses).
fn yaml_str(s: &str) -> String {
    serde_json::to_string(s)
        .unwrap()
        .replace('\u{7f}', "\\x7f")
        .replace('\u{85}', "\\x85")
}

/// A group whose envs hold every hostile value; its `dump` task writes
/// them NUL-separated to $SKYC_HOSTILE_OUT/envs.
pub(crate) fn hostile_yaml() -> String {
    let values = hostile_values();
    let mut envs = String::new();
    let mut names = Vec::new();
    for (i, v) in values.iter().enumerate() {
        envs.push_str(&format!("  V{i}: {}\n", yaml_str(v)));
        names.push(format!("V{i}"));
    }
    let dump = format!(
        "for v in {}; do printf '%s\\0' \"${{!v}}\"; done >\"$SKYC_HOSTILE_OUT/envs\"\n",
        names.join(" ")
    );
    format!(
        "name: hostile\nexecution: parallel\n---\nname: dump\nenvs:\n{envs}run: {}\n---\n\
         name: weird\nenvs:\n  X: {}\nrun: {}\n",
        yaml_str(&dump),
        yaml_str(&values[1]),
        yaml_str(&format!("{HOSTILE_RUN_BODY}echo done\n")),
    )
}

#[test]
fn hostile_values_survive_quoting_byte_for_byte() {
    let c = compile(
        "hostile.yaml",
        hostile_yaml().as_bytes(),
        &Options::default(),
    );
    let group = c.group.unwrap_or_else(|| panic!("{:?}", c.diagnostics));
    let script = build(&group);
    // Only the header may hold #SBATCH lines sbatch reads; none comes from
    // a user value.
    let header_end = script.find("set -u\n").unwrap();
    assert!(!script[..header_end].contains("99"));
    assert_eq!(script[..header_end].matches("#SBATCH hetjob").count(), 1);

    let dir = tmp_dir("hostile");
    let files = dir.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let canary = dir.join("CANARY");
    // The script's own data section and file writers, run by bash.
    let data_start = script.find("# ---- the group").unwrap();
    let data = &script[data_start..script.find(SUPERVISOR_MARKER).unwrap()];
    let writer = &script[script.find("skyc_write_step() {").unwrap()..];
    let writer = &writer[..writer.find("\n}\n").unwrap() + 3];
    std::fs::write(dir.join("data.sh"), format!("{data}{writer}")).unwrap();
    let status = Command::new("bash")
        .arg("-c")
        .arg(r#". "$1/data.sh" && skyc_write_task_files "$1/files" && skyc_write_step "$1/files/step.sh""#)
        .arg("bash")
        .arg(&dir)
        .env("SKYC_CANARY", &canary)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(
        std::fs::read_to_string(files.join("step.sh")).unwrap(),
        STEP
    );
    for (g, task) in group.tasks.iter().enumerate() {
        let written = std::fs::read_to_string(files.join(format!("{g}.run"))).unwrap();
        assert!(
            written.ends_with(task.run.as_deref().unwrap()),
            "task {g}: run text changed"
        );
    }
    // Running the written scripts: the envs arrive exactly, nothing runs
    // that the user did not write.
    for g in 0..group.tasks.len() {
        run_hostile_script(&files.join(format!("{g}.run")), &dir, &canary);
    }
    check_hostile_outputs(&dir, &canary);
}

/// Runs a script written from the hostile group under bash, its outputs
/// going to `dir`; it must succeed.
pub(crate) fn run_hostile_script(script: &Path, dir: &Path, canary: &Path) {
    let out = Command::new("bash")
        .arg(script)
        .current_dir(dir)
        .env("SKYC_CANARY", canary)
        .env("SKYC_HOSTILE_OUT", dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What the hostile group's tasks wrote, compared with the values.
pub(crate) fn check_hostile_outputs(dir: &Path, canary: &Path) {
    let envs = std::fs::read(dir.join("envs")).unwrap();
    let got: Vec<&[u8]> = envs.split(|b| *b == 0).collect();
    let want = hostile_values();
    assert_eq!(got.len(), want.len() + 1, "one NUL after each value");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(*g, w.as_bytes(), "env value changed");
    }
    let heredoc = std::fs::read_to_string(dir.join("heredoc")).unwrap();
    assert!(heredoc.starts_with("$(touch \"$SKYC_CANARY\") `touch"));
    assert!(
        !canary.exists(),
        "the canary was created: a value escaped its quoting"
    );
}

#[test]
fn hostile_names_never_reach_the_target() {
    for name in ["a'b", "a b", "$(x)", "a`b`", "a\\nb", "-x"] {
        let yaml = format!(
            "name: g\nexecution: parallel\n---\nname: {}\nrun: echo\n",
            serde_json::to_string(name).unwrap()
        );
        let c = compile("n.yaml", yaml.as_bytes(), &Options::default());
        assert!(c.group.is_none(), "{name:?} accepted as a task name");
    }
}

#[test]
fn unsafe_sbatch_values_are_located_errors() {
    let dir = tmp_dir("sbatch-errors");
    let file = dir.join("g.yaml");
    std::fs::write(
        &file,
        "name: g\nexecution: parallel\n---\nname: t\nrun: echo\nconfig:\n  slurm:\n    sbatch_options:\n      \
         comment: \"x #SBATCH --nodes=9\"\n      mail-type: END\n      nodes: 3\n      exclusive: true\n",
    )
    .unwrap();
    let out = skyc()
        .args(["build", "--target", "slurm", "--color", "never"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    assert_eq!(
        stderr.matches("error[slurm-sbatch-option]").count(),
        2,
        "{stderr}"
    );
    assert!(
        stderr.contains("g.yaml:4:7"),
        "located at the task: {stderr}"
    );
    assert!(stderr.contains("`--nodes` is set by skyc"), "{stderr}");

    // Flags are checked before anything is built.
    for bad in [
        &["--partition", "a b"][..],
        &["--sbatch-option", "comment=a#b"],
        &["--time", "1;2"],
    ] {
        let out = skyc()
            .args(["build", "--target", "slurm"])
            .args(bad)
            .arg(root().join("examples/train-eval.yaml"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
    let out = skyc()
        .args([
            "build",
            "--target",
            "slurm",
            "--partition",
            "gpu",
            "--account",
            "proj-1",
        ])
        .args([
            "--time",
            "01:00:00",
            "--sbatch-option",
            "mail-type=END,FAIL",
            "--sbatch-option",
            "exclusive",
        ])
        .arg(root().join("examples/train-eval.yaml"))
        .output()
        .unwrap();
    let script = String::from_utf8(out.stdout).unwrap();
    for line in [
        "#SBATCH --partition=gpu",
        "#SBATCH --account=proj-1",
        "#SBATCH --time=01:00:00",
        "#SBATCH --mail-type=END,FAIL",
        "#SBATCH --exclusive",
    ] {
        assert!(script.contains(line), "{line} missing");
    }
    assert_eq!(
        script.matches("#SBATCH --partition=gpu").count(),
        2,
        "one per component"
    );
    assert_eq!(
        script.matches("#SBATCH --time").count(),
        1,
        "the job's, in component 0"
    );
}

/// `skyc run --target slurm` checks what it can before anything reaches
/// the cluster: a secret without a value is a located error, exit 1.
#[test]
fn run_on_slurm_reports_a_missing_secret_before_submitting() {
    let dir = tmp_dir("run-secret");
    let file = dir.join("g.yaml");
    std::fs::write(
        &file,
        "name: secretive\nexecution: parallel\n---\nname: a\nsecrets: {SKYC_TEST_NO_SUCH_TOKEN: null}\nrun: 'true'\n",
    )
    .unwrap();
    let out = skyc()
        .args([
            "run",
            "g.yaml",
            "--target",
            "slurm",
            "--color",
            "never",
            "--state-dir",
        ])
        .arg(dir.join("state"))
        .current_dir(&dir)
        .env_remove("SKYC_TEST_NO_SUCH_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(!dir.join("state").exists(), "nothing was recorded");
    snapshots("slurm").bind(|| {
        insta::assert_snapshot!("run_missing_secret", String::from_utf8_lossy(&out.stderr));
    });
}

#[test]
fn run_flags_of_the_other_target_are_usage_errors() {
    let file = root().join("examples/train-eval.yaml");
    for (args, says) in [
        (
            &["--target", "slurm", "--network", "loopback"][..],
            "--network is for the local target",
        ),
        (
            &["--out-dir", "/tmp/x"][..],
            "--out-dir is for the Slurm target",
        ),
    ] {
        let out = skyc().arg("run").arg(&file).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{stderr}");
    }
}

/// A pipeline's chain is skyc's: options that would change it are located
/// errors, from the task's config or the command line.
#[test]
fn options_that_would_change_the_chain_are_refused_in_pipelines() {
    let dir = tmp_dir("chain-options");
    let file = dir.join("p.yaml");
    std::fs::write(
        &file,
        "name: p\n---\nname: a\nrun: echo\n---\nname: b\nrun: echo\nconfig:\n  slurm:\n    \
         sbatch_options:\n      dependency: afterany:1\n",
    )
    .unwrap();
    let build = |extra: &[&str]| {
        skyc()
            .args(["build", "--target", "slurm", "--color", "never"])
            .args(extra)
            .arg(&file)
            .output()
            .unwrap()
    };
    let out = build(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(stderr.contains("error[slurm-sbatch-option]: `--dependency` would change how a pipeline's steps are chained"), "{stderr}");
    assert!(
        stderr.contains("p.yaml:6:7"),
        "located at the step: {stderr}"
    );
    std::fs::write(
        &file,
        "name: p\n---\nname: a\nrun: echo\n---\nname: b\nrun: echo\n",
    )
    .unwrap();
    let out = build(&["--sbatch-option", "kill-on-invalid-dep=no"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.matches("`--kill-on-invalid-dep`").count(),
        1,
        "once: {stderr}"
    );
    // In a Job Group they are the user's.
    std::fs::write(
        &file,
        "name: g\nexecution: parallel\n---\nname: a\nrun: echo\n",
    )
    .unwrap();
    let out = build(&["--sbatch-option", "dependency=afterok:1"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("#SBATCH --dependency=afterok:1\n"));
}

/// `skyc build --out DIR` writes each step's job and submit.sh.
#[test]
fn pipelines_build_to_a_directory() {
    let dir = tmp_dir("pipeline-cli");
    let jobs = dir.join("jobs");
    let file = root().join("tests/fixtures/pipelines/three-steps.yaml");
    let out = skyc()
        .args(["build", "--target", "slurm", "--out"])
        .arg(&jobs)
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let mut names: Vec<String> = std::fs::read_dir(&jobs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "step-0-extract.sbatch",
            "step-1-transform.sbatch",
            "step-2-load.sbatch",
            "submit.sh"
        ]
    );
    let stdout = skyc()
        .args(["build", "--target", "slurm"])
        .arg(&file)
        .output()
        .unwrap()
        .stdout;
    let stdout = String::from_utf8(stdout).unwrap();
    for name in &names[..3] {
        let script = std::fs::read_to_string(jobs.join(name)).unwrap();
        assert!(stdout.contains(&script), "{name} is embedded as written");
    }
}

/// GPUs asked by type: as written without a cluster (`skyc build`); as
/// the cluster names them when its GPU nodes are known (`skyc run`), by
/// SkyPilot's matching; a type, or a count per node, the cluster does not
/// have is an error at the accelerator, naming what it has.
#[test]
fn gpus_are_asked_by_the_type_the_cluster_names() {
    use skyc_targets::slurm::gres::GpuNodes;
    let text = "name: g\nexecution: parallel\n---\nname: big\nresources:\n  accelerators: H100:8\nrun: echo\n---\nname: small\nresources:\n  accelerators: {A100-80GB: 2}\nrun: echo\n";
    let c = compile("g.yaml", text.as_bytes(), &Options::default());
    let group = c.group.clone().unwrap();
    let gres = |script: &str| -> Vec<String> {
        script
            .lines()
            .filter(|l| l.starts_with("#SBATCH --gres"))
            .map(str::to_owned)
            .collect()
    };
    let built = slurm::build(&group, &slurm::Options::default());
    assert!(built.diagnostics.is_empty(), "{:?}", built.diagnostics);
    assert_eq!(
        gres(built.script.as_deref().unwrap()),
        [
            "#SBATCH --gres=gpu:H100:8",
            "#SBATCH --gres=gpu:A100-80GB:2"
        ]
    );
    let node = |ty: &str, per_node, nodes| GpuNodes {
        partition: "main".into(),
        default: true,
        gpu_type: Some(ty.to_owned()),
        per_node,
        nodes,
    };
    let cluster = vec![
        node("nvidia_h100_80gb_hbm3", 8, 16),
        node("a100-sxm4-80gb", 4, 8),
        node("l40", 4, 2),
    ];
    let options = slurm::Options {
        gpus: Some(cluster.clone()),
        ..Default::default()
    };
    let built = slurm::build(&group, &options);
    assert!(built.diagnostics.is_empty(), "{:?}", built.diagnostics);
    assert_eq!(
        gres(built.script.as_deref().unwrap()),
        [
            "#SBATCH --gres=gpu:nvidia_h100_80gb_hbm3:8",
            "#SBATCH --gres=gpu:a100-sxm4-80gb:2"
        ]
    );
    // L4 is not L40; and no A100 node has 8.
    let wrong = text
        .replace("H100:8", "L4:1")
        .replace("A100-80GB: 2", "A100-80GB: 8");
    let mut c = compile("g.yaml", wrong.as_bytes(), &Options::default());
    let built = slurm::build(c.group.as_ref().unwrap(), &options);
    assert!(built.script.is_none());
    c.diagnostics.extend(built.diagnostics);
    snapshots("slurm").bind(|| {
        insta::assert_snapshot!("gpu-types-the-cluster-lacks", render_human(&c));
    });
    // A cluster whose GPUs have no type: any GPU, said.
    let untyped = slurm::Options {
        gpus: Some(vec![GpuNodes {
            partition: "main".into(),
            default: true,
            gpu_type: None,
            per_node: 8,
            nodes: 4,
        }]),
        ..Default::default()
    };
    let built = slurm::build(&group, &untyped);
    assert_eq!(
        gres(built.script.as_deref().unwrap()),
        ["#SBATCH --gres=gpu:8", "#SBATCH --gres=gpu:2"]
    );
    assert_eq!(built.diagnostics.len(), 2, "{:?}", built.diagnostics);
    assert!(
        built
            .diagnostics
            .iter()
            .all(|d| d.message.contains("is not requested")),
        "{:?}",
        built.diagnostics
    );
    // A task whose own sbatch options send it to another partition is
    // matched against that partition's nodes.
    let mut cluster = cluster;
    cluster.push(GpuNodes {
        partition: "big".into(),
        default: false,
        gpu_type: Some("H100".into()),
        per_node: 8,
        nodes: 2,
    });
    let elsewhere = text.replace(
        "name: big\nresources:",
        "name: big\nconfig:\n  slurm:\n    sbatch_options:\n      partition: big\nresources:",
    );
    let c = compile("g.yaml", elsewhere.as_bytes(), &Options::default());
    let built = slurm::build(
        c.group.as_ref().unwrap(),
        &slurm::Options {
            gpus: Some(cluster),
            ..Default::default()
        },
    );
    assert!(built.diagnostics.is_empty(), "{:?}", built.diagnostics);
    assert_eq!(
        gres(built.script.as_deref().unwrap()),
        [
            "#SBATCH --gres=gpu:H100:8",
            "#SBATCH --gres=gpu:a100-sxm4-80gb:2"
        ]
    );
}

/// A run's files: each task's view is written out byte for byte, the
/// files helper's path reaches the lifecycle exactly, and no value written
/// to be quoted runs; the script passes shellcheck.
#[test]
fn files_reach_the_nodes_views_exactly_and_nothing_runs() {
    use skyc_targets::files::{Delivery, Mount, Taken, View};
    let c = compile(
        "hostile.yaml",
        hostile_yaml().as_bytes(),
        &Options::default(),
    );
    let group = c.group.unwrap_or_else(|| panic!("{:?}", c.diagnostics));
    let values = hostile_values();
    let dir = tmp_dir("files-hostile");
    let canary = dir.join("CANARY");
    let delivery = Delivery {
        tasks: group
            .tasks
            .iter()
            .map(|_| {
                values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| Mount {
                        destination: format!("/{v}"),
                        source: v.clone(),
                        workdir: i == 0,
                        taken: Taken {
                            digest: format!("{i}{v}"),
                            dir: i % 2 == 0,
                            files: 1,
                            bytes: 1,
                        },
                    })
                    .collect()
            })
            .collect(),
        volumes: group
            .tasks
            .iter()
            .map(|_| {
                vec![skyc_targets::files::Volume {
                    destination: format!("/{}", values[5]),
                    name: values[6].clone(),
                    dir: dir.join(&values[2]),
                }]
            })
            .collect(),
        buckets: Vec::new(),
        snapshots: dir.join(&values[1]),
        helper: dir.join(&values[3]),
    };
    let options = slurm::Options {
        grace_secs: 30,
        files: Some(delivery.clone()),
        ..Default::default()
    };
    let built = slurm::build(&group, &options);
    let script = built
        .script
        .unwrap_or_else(|| panic!("{:?}", built.diagnostics));
    let files = dir.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let data_start = script.find("# ---- the group").unwrap();
    let data = &script[data_start..script.find(SUPERVISOR_MARKER).unwrap()];
    std::fs::write(dir.join("data.sh"), data).unwrap();
    let status = Command::new("bash")
        .arg("-c")
        .arg(r#". "$1/data.sh" && skyc_write_task_files "$1/files" && printf '%s' "$skyc_files_helper" >"$1/helper""#)
        .arg("bash")
        .arg(&dir)
        .env("SKYC_CANARY", &canary)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(!canary.exists(), "a value ran");
    assert_eq!(
        std::fs::read_to_string(dir.join("helper")).unwrap(),
        delivery.helper.display().to_string()
    );
    for g in 0..group.tasks.len() {
        let written = std::fs::read_to_string(files.join(format!("{g}.files"))).unwrap();
        let view: View = serde_json::from_str(&written).unwrap();
        let want = delivery.view(g, skyc_targets::files::Layers::Memory(None));
        assert_eq!(written, want.to_json());
        assert_eq!(view.places.len(), values.len() + 1);
        assert!(
            view.places[values.len()].shared,
            "the volume, bound as it is"
        );
        assert_eq!(view.cwd.as_deref(), Some("~/sky_workdir"));
    }
    // A delivered workdir is where the files helper starts the task: its
    // script does not `cd` in place, as it does when nothing is delivered.
    let c = compile(
        "w.yaml",
        b"name: w\nexecution: parallel\n---\nname: t\nworkdir: src\nrun: pwd\n",
        &Options::default(),
    );
    let group = c.group.unwrap_or_else(|| panic!("{:?}", c.diagnostics));
    let workdir = Mount {
        destination: "~/sky_workdir".into(),
        source: "/repo/src".into(),
        workdir: true,
        taken: Taken {
            digest: "d".into(),
            dir: true,
            files: 1,
            bytes: 1,
        },
    };
    let with = |files: Option<Delivery>| {
        let built = slurm::build(
            &group,
            &slurm::Options {
                files,
                ..Default::default()
            },
        );
        built
            .script
            .unwrap_or_else(|| panic!("{:?}", built.diagnostics))
    };
    assert!(with(None).contains("cd -- src"));
    let delivered = with(Some(Delivery {
        tasks: vec![vec![workdir]],
        ..Default::default()
    }));
    assert!(!delivered.contains("cd -- src"), "{delivered}");
    assert!(delivered.contains("0.files"), "{delivered}");
    if have("shellcheck") {
        let path = dir.join("files.sh");
        std::fs::write(&path, &script).unwrap();
        shellcheck(&path);
    }
}
