//! The Slurm target without a cluster: snapshots of the scripts for
//! SkyPilot's examples, shellcheck on every emitted script, and a hostile
//! corpus whose values must come out of the script's quoting byte for byte.
//! The end-to-end tests on a real cluster are in `slurm_e2e.rs`.

use crate::examples::{accepted_examples, example_texts};
use crate::support::{render_human, root, skyc, snapshots};
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
                // A pipeline: a located error, no script.
                None if group.execution == skyc_compiler::ir::Execution::Serial => render_human(&c),
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
        // Pipelines have no Slurm script (a located error, tested above).
        .filter(|(_, g)| g.execution == skyc_compiler::ir::Execution::Parallel)
        .map(|(n, g)| (n.clone(), build(g)))
        .collect();
    let hostile = compile(
        "hostile.yaml",
        hostile_yaml().as_bytes(),
        &Options::default(),
    );
    scripts.push(("hostile".into(), build(hostile.group.as_ref().unwrap())));
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
