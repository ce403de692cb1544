//! A task's files on a cloud node, through the node's own scripts: the
//! boot script of a group whose files were taken writes `files.sh`, which
//! the agent sources before setup. Here bash runs it as the agent does,
//! each snapshot's URL a `file://` one to the stream the runtime uploads
//! (`skyc_runtime::files::tar`): the bytes at each destination are the
//! sources', hostile destinations are written where they say and run
//! nothing, and a stream that is not the submitted one is refused. The
//! fetch from S3 itself is `tests/aws_run.rs`' (stand-in machines).

use super::{boot_script, tmp_dir};
use crate::support::snapshots;
use skyc_compiler::{Options, compile};
use skyc_runtime::files::take::{Taking, take};
use skyc_runtime::files::{Snapshots, pack};
use skyc_targets::cloud::{self, Catalog, Cloud};
use skyc_targets::files::{Files, Mount, Pack, Taken};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Writes the node's files as its boot script does, into `dir`, with the
/// directories its launcher makes.
fn write_node_files(script: &str, dir: &Path) {
    super::boot::write_node_files(script, dir, &dir.join("CANARY"));
    std::fs::create_dir_all(dir.join("files")).unwrap();
    std::fs::create_dir_all(dir.join("workdir")).unwrap();
}

/// Sources the node's `files.sh` as the agent does (in a subshell, in an
/// `if`, where `set -e` would not hold: each line must end it on
/// failure; HOME given): its output, and whether it succeeded.
fn place(node: &Path, home: &Path) -> (bool, String) {
    let out = Command::new("bash")
        .arg("-c")
        .arg(r#"skyc_dir=$1; if (. "$skyc_dir/files.sh"); then exit 0; else exit 1; fi"#)
        .arg("bash")
        .arg(node)
        .env("HOME", home)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Every regular file under `dir` with its bytes, by relative path.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((
                    p.strip_prefix(dir).unwrap().to_owned(),
                    std::fs::read(&p).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn files_land_at_their_destinations_byte_for_byte() {
    if Command::new("curl").arg("--version").output().is_err() {
        eprintln!("!!! SKIPPED: curl is missing");
        return;
    }
    let t = tmp_dir("files-place");
    let src = t.join("src");
    let code = src.join("code");
    std::fs::create_dir_all(code.join("sub dir")).unwrap();
    std::fs::write(code.join("train.py"), "print('train')\n").unwrap();
    std::fs::write(code.join("sub dir/it's $(touch CANARY).txt"), b"odd\n").unwrap();
    let blob: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(src.join("data.bin"), &blob).unwrap();
    let canary = t.join("CANARY");
    // An absolute destination whose name holds quotes, `$(...)`, a
    // newline; one under `~` with a space; the workdir.
    let hostile = t.join("dst/it's \"$(touch CANARY)\"\nx");
    let yaml = format!(
        "name: files\n---\nname: a\nworkdir: {code}\nfile_mounts:\n  {hostile}: {code}\n  \"~/my data/blob.bin\": {data}\n  ~/sky_workdir/in/blob.bin: {data}\nrun: \"true\"\n",
        code = code.display(),
        hostile = serde_json::to_string(&hostile.display().to_string()).unwrap(),
        data = src.join("data.bin").display(),
    );
    let c = compile("g.yaml", yaml.as_bytes(), &Options::default());
    let group = c.group.unwrap_or_else(|| panic!("{:?}", c.diagnostics));
    let snapshots = Snapshots::of(&t.join("state"));
    let writing = snapshots.writing().unwrap();
    let (taken, diagnostics) = take(
        &group,
        &mut Taking {
            cwd: &t,
            home: Some(&t),
            into: Some((&snapshots, &writing)),
            limit_bytes: 1 << 30,
            progress: &mut |_, _| {},
            mount_buckets: skyc_runtime::files::take::Mounting::No,
            submitting: false,
        },
    );
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    let files = pack::packs(&taken.tasks, &snapshots, false).unwrap();
    let built = cloud::build_with_files(&group, &Catalog::snapshot(Cloud::Aws), Some(&files));
    let doc = built
        .document
        .unwrap_or_else(|| panic!("{:?}", built.diagnostics));
    let script = boot_script(&doc["nodes"][0]).to_owned();
    // The streams as the runtime uploads them, each at a file:// URL.
    let tars = t.join("tars");
    std::fs::create_dir_all(&tars).unwrap();
    let node = t.join("node");
    write_node_files(&script, &node);
    for digest in files.packs.keys() {
        let tar = tars.join(format!("{digest}.tar"));
        skyc_runtime::files::tar::write(
            &snapshots.path(digest),
            std::fs::File::create(&tar).unwrap(),
        )
        .unwrap();
        std::fs::write(
            node.join(format!("files/{digest}.url")),
            format!("file://{}\n", tar.display()),
        )
        .unwrap();
    }
    let home = t.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let (ok, out) = place(&node, &home);
    assert!(ok, "{out}");
    let sources = tree(&code);
    assert_eq!(sources.len(), 2);
    // A mount under `~/sky_workdir` lands in the workdir.
    assert_eq!(
        std::fs::read(node.join("workdir/in/blob.bin")).unwrap(),
        blob
    );
    std::fs::remove_dir_all(node.join("workdir/in")).unwrap();
    assert_eq!(tree(&node.join("workdir")), sources);
    assert_eq!(tree(&hostile), sources);
    assert_eq!(std::fs::read(home.join("my data/blob.bin")).unwrap(), blob);
    assert_eq!(
        std::fs::read_link(home.join("sky_workdir")).unwrap(),
        node.join("workdir")
    );
    assert!(!canary.exists() && !t.join("dst/CANARY").exists());

    // A stream that is not the submitted one is refused, and placed
    // nowhere.
    let node2 = t.join("node2");
    write_node_files(&script, &node2);
    for digest in files.packs.keys() {
        let tar = tars.join(format!("{digest}.tar"));
        let mut bytes = std::fs::read(&tar).unwrap();
        bytes[600] ^= 1;
        let bad = tars.join(format!("{digest}.bad.tar"));
        std::fs::write(&bad, bytes).unwrap();
        std::fs::write(
            node2.join(format!("files/{digest}.url")),
            format!("file://{}\n", bad.display()),
        )
        .unwrap();
    }
    let home2 = t.join("home2");
    std::fs::create_dir_all(&home2).unwrap();
    let (ok, out) = place(&node2, &home2);
    assert!(!ok);
    assert!(
        out.contains("fetched are not the submitted ones (their SHA-256 differs)"),
        "{out}"
    );
    assert!(tree(&node2.join("workdir")).is_empty());
    drop(writing);
}

/// The `files.sh` a node's boot script writes, for review: a workdir, an
/// absolute directory, a file under `~` and `~` itself.
#[test]
fn the_boot_script_carries_each_tasks_places() {
    let yaml = "name: files\n---\nname: a\nworkdir: code\nfile_mounts:\n  /code: code\n  ~/data/x.csv: x.csv\n  \"~\": dotfiles\nrun: \"true\"\n---\nname: b\nrun: \"true\"\n";
    let c = compile("g.yaml", yaml.as_bytes(), &Options::default());
    let group = c.group.unwrap();
    let mount = |destination: &str, source: &str, workdir: bool, digest: char, dir: bool| Mount {
        destination: destination.into(),
        source: source.into(),
        workdir,
        taken: Taken {
            digest: digest.to_string().repeat(64),
            dir,
            files: 1,
            bytes: 10,
        },
    };
    let files = Files {
        tasks: vec![
            vec![
                mount("~/sky_workdir", "/src/code", true, 'a', true),
                mount("/code", "/src/code", false, 'a', true),
                mount("~/data/x.csv", "/src/x.csv", false, 'b', false),
                mount("~", "/src/dotfiles", false, 'c', true),
            ],
            Vec::new(),
        ],
        packs: [('a', 'd'), ('b', 'e'), ('c', 'f')]
            .into_iter()
            .map(|(digest, sha)| {
                (
                    digest.to_string().repeat(64),
                    Pack {
                        sha256: sha.to_string().repeat(64),
                        bytes: 10240,
                        data: None,
                    },
                )
            })
            .collect(),
        buckets: Vec::new(),
    };
    let built = cloud::build_with_files(&group, &Catalog::snapshot(Cloud::Aws), Some(&files));
    let doc = built
        .document
        .unwrap_or_else(|| panic!("{:?}", built.diagnostics));
    assert!(
        built.diagnostics.is_empty(),
        "delivered files are not reported: {:?}",
        built.diagnostics
    );
    let nodes = doc["nodes"].as_array().unwrap();
    let a = boot_script(&nodes[0]);
    let b = boot_script(&nodes[1]);
    let start = a.find("skyc_files=").unwrap();
    let settings = &a[start..a[start..].find('\n').unwrap() + start];
    let places = &a[a.find("skyc_place ").unwrap()..a.find("SKYC_FILES\n").unwrap()];
    snapshots("cloud").bind(|| {
        insta::assert_snapshot!("files.aws.boot", format!("{settings}\n{places}"));
    });
    // A task without files has neither.
    assert!(!b.contains("skyc_files=") && !b.contains("files.sh\" <<"));
}
