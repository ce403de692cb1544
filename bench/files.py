#!/usr/bin/env python3
"""Whole-process benchmarks of a task's files on the local target (release build).

  snapshot  a 100 MB workdir of 10,000 files: `skyc build --target files`
            (read and digested) and `skyc run -d` up to the group's
            submission (read, digested and written to the state
            directory), in MB/s; beside them `cp -r` of the same tree, the
            machine's own copying speed. Target: >= 200 MB/s, digest
            included.
  delivery  the same workdir to groups of 10 and 100 nodes: the bytes
            written to the state directory for the files (the snapshot and
            every node's writable layer, measured while every node runs),
            and the time from `skyc run -d` to every node started. Target:
            bytes independent of the node count.

Usage: bench/files.py [--runs N] [--only snapshot|delivery]
Environment: SKYC_BENCH_BIN (a skyc binary; default: cargo build --release).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = 10_000
SIZE = 100 * 1000 * 1000


def skyc_binary():
    if os.environ.get("SKYC_BENCH_BIN"):
        return os.environ["SKYC_BENCH_BIN"]
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    return str(Path(target) / "release" / "skyc")


def make_workdir(tmp):
    """10,000 files of random bytes in 100 directories, 100 MB in all."""
    src = tmp / "src"
    each = SIZE // FILES
    for d in range(100):
        (src / f"d{d}").mkdir(parents=True)
        for f in range(FILES // 100):
            (src / f"d{d}" / f"f{f}.bin").write_bytes(os.urandom(each))
    (src / "main.txt").write_text("v1\n")
    return src


def du(path):
    """Bytes of regular files under `path` (each inode once)."""
    seen, total = set(), 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def wait_idle(state):
    for _ in range(400):
        if not (state / "supervisor.sock").exists():
            return
        time.sleep(0.05)


def group(nodes):
    return (
        f"name: files\nnum_nodes: {nodes}\nworkdir: src\nrun: |\n"
        '  cat main.txt > "$BENCH/started-$SKYPILOT_NODE_RANK"\n'
        '  while [ ! -e "$BENCH/go" ]; do sleep 0.1; done\n'
    )


def bench_snapshot(skyc, tmp, runs):
    (tmp / "g.yaml").write_text(group(1))
    build, run, cp = [], [], []
    for i in range(runs):
        t = time.perf_counter()
        subprocess.run(
            [skyc, "build", "g.yaml", "--target", "files"],
            cwd=tmp, check=True, stdout=subprocess.DEVNULL,
        )
        build.append(time.perf_counter() - t)
        state = tmp / f"state-s{i}"
        t = time.perf_counter()
        subprocess.run(
            [skyc, "run", "-d", "g.yaml", "--state-dir", str(state)],
            cwd=tmp, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "BENCH": str(tmp)},
        )
        run.append(time.perf_counter() - t)
        (tmp / "go").write_text("")
        subprocess.run([skyc, "cancel", "--all", "--state-dir", str(state)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_idle(state)
        (tmp / "go").unlink()
        shutil.rmtree(state, ignore_errors=True)
        t = time.perf_counter()
        subprocess.run(["cp", "-r", str(tmp / "src"), str(tmp / "copy")], check=True)
        cp.append(time.perf_counter() - t)
        shutil.rmtree(tmp / "copy")
    mb = SIZE / 1e6
    for name, samples in [("build --target files (read, digest)", build),
                          ("run -d (read, digest, write)", run),
                          ("cp -r (the machine's copy)", cp)]:
        med = statistics.median(samples)
        print(f"snapshot  {name:38} median {med * 1000:7.0f} ms  {mb / med:6.0f} MB/s")


def bench_delivery(skyc, tmp):
    for nodes in (10, 100):
        state = tmp / f"state-d{nodes}"
        (tmp / "g.yaml").write_text(group(nodes))
        for f in tmp.glob("started-*"):
            f.unlink()
        t = time.perf_counter()
        subprocess.run(
            [skyc, "run", "-d", "g.yaml", "--state-dir", str(state)],
            cwd=tmp, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "BENCH": str(tmp)},
        )
        while len(list(tmp.glob("started-*"))) < nodes:
            time.sleep(0.01)
            if time.perf_counter() - t > 300:
                raise SystemExit("nodes did not start")
        started = time.perf_counter() - t
        snapshot = du(state / "files")
        layers = du(state / "groups")
        (tmp / "go").write_text("")
        subprocess.run([skyc, "cancel", "--all", "--state-dir", str(state)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_idle(state)
        (tmp / "go").unlink()
        shutil.rmtree(state, ignore_errors=True)
        print(
            f"delivery  {nodes:3} nodes: snapshot {snapshot / 1e6:6.1f} MB, group directory "
            f"(logs, scripts, writable layers) {layers / 1e6:6.2f} MB, all started in "
            f"{started:5.2f} s"
        )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", choices=["snapshot", "delivery"])
    args = ap.parse_args()
    skyc = skyc_binary()
    with tempfile.TemporaryDirectory(prefix="skyc-bench-files-") as d:
        tmp = Path(d)
        make_workdir(tmp)
        if args.only in (None, "snapshot"):
            bench_snapshot(skyc, tmp, args.runs)
        if args.only in (None, "delivery"):
            bench_delivery(skyc, tmp)


if __name__ == "__main__":
    main()
