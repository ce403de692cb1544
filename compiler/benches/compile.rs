//! In-process benchmarks of [`skyc_compiler::compile`]: the RLHF example and
//! generated Job Groups of 10, 100 and 1,000 tasks (8 nodes each).
//!
//! Throughput is in bytes of input, so a linear compiler shows the same
//! bytes/s at every size. Process start-up and the one-time compilation of
//! the JSON Schemas are not in these figures (criterion warms up first);
//! `bench/check.sh` measures the whole process.
//!
//! Run: `cargo bench -p skyc-compiler --bench compile`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use skyc_compiler::{Options, compile};
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

const RLHF: &str = "rl-post-training-jobgroup__rlhf-math-jobgroup.yaml";

/// The RLHF example: `$SKYC_EXAMPLES_DIR`, else the shared reference copy
/// beside the repository, else the test fixtures' copy.
fn rlhf() -> Option<(String, Vec<u8>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dirs = [
        std::env::var_os("SKYC_EXAMPLES_DIR").map(PathBuf::from),
        Some(root.join("../shared/reference/skypilot-examples")),
        Some(root.join("tests/fixtures/skypilot-examples")),
    ];
    dirs.into_iter().flatten().find_map(|dir| {
        let path = dir.join(RLHF);
        let bytes = std::fs::read(&path).ok()?;
        Some((path.display().to_string(), bytes))
    })
}

/// A Job Group of `n` tasks, 8 nodes each, with realistic bodies:
/// resources, envs, setup, and a run script naming other tasks' hosts
/// (`task-12-3.${SKYPILOT_JOBGROUP_NAME}`). Byte for byte the generator
/// of `bench/check.sh`; keep the two in sync.
fn generate_group(n: usize) -> String {
    const ACCELERATORS: [&str; 3] = ["H100:8", "A100-80GB:8", "L4:8"];
    const G: &str = "${SKYPILOT_JOBGROUP_NAME}";
    let mut s = String::with_capacity(720 * n + 100);
    let _ = write!(
        s,
        "---\nname: bench-{n}\nexecution: parallel\nprimary_tasks: [task-0]\ntermination_delay: 30s\n"
    );
    for i in 0..n {
        let accelerators = ACCELERATORS[i % 3];
        let (far, next, prev) = ((7 * i + 12) % n, (i + 1) % n, (i + n - 1) % n);
        let _ = write!(
            s,
            "---\nname: task-{i}\nnum_nodes: 8\nresources:\n  cpus: 8+\n  memory: 64+\n  \
             accelerators: {accelerators}\n  infra: kubernetes\n\
             envs:\n  MODEL_NAME: Qwen/Qwen2.5-7B-Instruct\n  PEER_HOST: task-{far}-3.{G}\n  \
             BATCH_SIZE: 64\n\
             setup: |\n  uv pip install torch transformers accelerate --system\n\
             run: |\n  echo \"task-{i}: node ${{SKYPILOT_NODE_RANK}} of ${{SKYPILOT_NUM_NODES}}\"\n\
             \x20 HEAD=\"task-{i}-0.{G}:29500\"\n\
             \x20 NEXT=\"task-{next}-3.{G}:8000\"\n\
             \x20 PREV=\"task-{prev}-7.{G}:8000\"\n\
             \x20 if [ \"${{SKYPILOT_NODE_RANK}}\" == \"0\" ]; then\n\
             \x20   python train.py --head \"$HEAD\" --next \"$NEXT\" --prev \"$PREV\" \\\n\
             \x20     --peer \"$PEER_HOST\" --batch-size \"$BATCH_SIZE\"\n\
             \x20 else\n    sleep infinity\n  fi\n"
        );
    }
    s
}

fn bytes(input: &[u8]) -> Throughput {
    Throughput::Bytes(u64::try_from(input.len()).unwrap_or(u64::MAX))
}

fn benches(c: &mut Criterion) {
    let options = Options::default();
    if let Ok(dir) = std::env::var("SKYC_BENCH_DUMP") {
        // For checking that this generator and bench/check.sh's agree.
        for n in [10, 100, 1000] {
            let path = PathBuf::from(&dir).join(format!("group-{n}.yaml"));
            std::fs::write(path, generate_group(n)).expect("SKYC_BENCH_DUMP is writable");
        }
    }

    let mut group = c.benchmark_group("compile");
    match rlhf() {
        Some((name, input)) => {
            assert!(
                !compile(&name, &input, &options).has_errors(),
                "the RLHF example checks clean"
            );
            group.throughput(bytes(&input));
            group.bench_function("rlhf-math-jobgroup", |b| {
                b.iter(|| compile(black_box(&name), black_box(&input), &options));
            });
        }
        None => eprintln!("compile/rlhf-math-jobgroup: {RLHF} not found; skipped"),
    }
    for n in [10, 100, 1000] {
        let input = generate_group(n).into_bytes();
        let compilation = compile("generated.yaml", &input, &options);
        assert!(
            compilation.group.is_some() && compilation.diagnostics.is_empty(),
            "the generated {n}-task group checks clean: {:?}",
            compilation.diagnostics
        );
        group.throughput(bytes(&input));
        if n >= 100 {
            // Milliseconds per iteration: fewer, longer samples.
            group.sample_size(30);
            group.measurement_time(Duration::from_secs(10));
        }
        group.bench_with_input(
            BenchmarkId::new("generated-tasks", n),
            &input,
            |b, input| {
                b.iter(|| compile("generated.yaml", black_box(input), &options));
            },
        );
    }
    group.finish();
}

criterion_group!(compile_benches, benches);
criterion_main!(compile_benches);
