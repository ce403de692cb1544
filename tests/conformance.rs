//! The fixture corpus: every case records SkyPilot 0.14.1's own verdict
//! (from its loader, `sky-oracle`); skyc must agree unless the fixture
//! states a deliberate deviation. Every diagnostic is snapshotted.

use crate::support::{render_human, root, snapshots, yaml_files};
use skyc_compiler::{Options, compile};

struct Fixture {
    name: String,
    text: String,
    oracle_accepts: bool,
    deviation: Option<String>,
}

fn load(dir: &str) -> Vec<Fixture> {
    yaml_files(&root().join("tests/fixtures/check").join(dir))
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let header = |key: &str| {
                text.lines()
                    .take_while(|l| l.starts_with('#'))
                    .find_map(|l| l.strip_prefix(&format!("# {key}: ")).map(str::to_owned))
            };
            let oracle = header("oracle")
                .unwrap_or_else(|| panic!("{}: no `# oracle:` line", path.display()));
            Fixture {
                name: format!("{dir}/{}", path.file_name().unwrap().to_string_lossy()),
                oracle_accepts: oracle == "ACCEPT",
                deviation: header("deviation"),
                text,
            }
        })
        .collect()
}

#[test]
fn fixtures_agree_with_skypilot_except_listed_deviations() {
    let mut problems = Vec::new();
    let mut counts = [0usize; 3];
    for (dir, skyc_accepts) in [("accept", true), ("reject", false)] {
        for f in load(dir) {
            counts[usize::from(skyc_accepts)] += 1;
            let c = compile(&f.name, f.text.as_bytes(), &Options::default());
            if c.has_errors() == skyc_accepts {
                problems.push(format!(
                    "{}: skyc {}\n{}",
                    f.name,
                    if skyc_accepts {
                        "rejects it"
                    } else {
                        "accepts it"
                    },
                    render_human(&c)
                ));
            }
            match (&f.deviation, f.oracle_accepts == skyc_accepts) {
                (None, false) => problems.push(format!(
                    "{}: SkyPilot {} it, and no `# deviation:` says why skyc differs",
                    f.name,
                    if f.oracle_accepts {
                        "accepts"
                    } else {
                        "rejects"
                    }
                )),
                (Some(_), true) => problems.push(format!(
                    "{}: marked as a deviation, but SkyPilot agrees",
                    f.name
                )),
                (Some(_), false) => counts[2] += 1,
                (None, true) => {}
            }
        }
    }
    assert!(
        counts[0] > 100 && counts[1] > 100,
        "fixtures missing: {counts:?}"
    );
    assert!(
        problems.is_empty(),
        "{} of {} fixtures disagree:\n\n{}",
        problems.len(),
        counts[0] + counts[1],
        problems.join("\n")
    );
}

/// Every fixture's diagnostics, as a person sees them.
#[test]
fn fixture_diagnostics() {
    let settings = snapshots("diagnostics");
    settings.bind(|| {
        for dir in ["accept", "reject"] {
            for f in load(dir) {
                let c = compile(&f.name, f.text.as_bytes(), &Options::default());
                if c.diagnostics.is_empty() {
                    continue;
                }
                let snapshot = f
                    .name
                    .replace('/', "__")
                    .trim_end_matches(".yaml")
                    .to_owned();
                insta::assert_snapshot!(snapshot, render_human(&c));
            }
        }
    });
}
