#!/usr/bin/env python3
"""Whole-process benchmarks of `skyc run` on the local target (release build).

  start     `skyc run -d` of a 5-task group, to every node started (the
            moment its `run` script begins); no supervisor running before,
            so one is started each time.
  sigterm   a primary's exit to the SIGTERM of an auxiliary with delay 0.
  memory    20 and 100 five-task groups of `sleep` (100 and 500 nodes): the
            proportional memory (PSS) of every skyc process (the supervisor
            and the node agents) per node, and the supervisor's RSS.
  submit    `skyc run -d` of five-task `sleep` groups while the earlier ones
            run, up to the largest of --groups (default 2,000: 10,000
            nodes): the mean time of a submission in each tenth of the
            sweep, so the curve shows whether a submission costs more the
            more groups run (target: <= 50 ms each, and a line fitted
            through the tenths ends within 1.25x of where it starts).

Usage: bench/run.py [--runs N] [--network auto|loopback] [--groups N[,N...]]
                    [--only start|sigterm|memory|submit]
Environment: SKYC_BENCH_BIN (a skyc binary; default: cargo build --release).
Targets: start <= 100 ms, sigterm <= 50 ms, supervisor <= 50 MB,
skyc's memory <= 100 KiB per node.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def skyc_binary():
    if os.environ.get("SKYC_BENCH_BIN"):
        return os.environ["SKYC_BENCH_BIN"]
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    return str(Path(target) / "release" / "skyc")


def wait_idle(state):
    """Waits for the supervisor of `state` to exit (it does when idle)."""
    for _ in range(200):
        if not (state / "supervisor.sock").exists():
            return
        time.sleep(0.05)


def start_group(tmp):
    tasks = []
    for i in range(5):
        tasks.append(
            f"---\nname: t{i}\nrun: |\n"
            f'  date +%s%N > "$BENCH/started-$SKYPILOT_TASK_ID-$SKYPILOT_NODE_RANK"\n'
            f"  sleep 0.2\n"
        )
    text = "name: start\nexecution: parallel\n" + "".join(tasks)
    path = tmp / "start.yaml"
    path.write_text(text)
    return path


def read_ns(path):
    """A `date +%s%N` stamp; the shell may have created the file and not
    yet written it."""
    for _ in range(1000):
        text = path.read_text().strip()
        if text:
            return int(text)
        time.sleep(0.001)
    raise RuntimeError(f"{path} stays empty")


def bench_start(skyc, tmp, runs, network):
    group = start_group(tmp)
    samples = []
    state = tmp / "state-start"
    for i in range(runs):
        marks = tmp / f"marks-{i}"
        marks.mkdir()
        env = dict(os.environ, BENCH=str(marks))
        t0 = time.time_ns()
        subprocess.run(
            [skyc, "run", "-d", str(group), "--state-dir", str(state), "--network", network],
            env=env, check=True, stdout=subprocess.DEVNULL,
        )
        while len(list(marks.iterdir())) < 5:
            time.sleep(0.001)
        last = max(read_ns(p) for p in marks.iterdir())
        samples.append((last - t0) / 1e6)
        wait_idle(state)
    return samples


def bench_sigterm(skyc, tmp, runs, network):
    text = """name: term
execution: parallel
primary_tasks: [main]
termination_delay: 0s
---
name: main
run: |
  sleep 0.3
  date +%s%N > "$BENCH/exit"
---
name: aux
run: |
  trap 'date +%s%N > "$BENCH/term"; exit 0' TERM
  while true; do sleep 0.01; done
"""
    group = tmp / "term.yaml"
    group.write_text(text)
    samples = []
    for i in range(runs):
        state = tmp / f"state-term-{i}"
        marks = tmp / f"term-{i}"
        marks.mkdir()
        env = dict(os.environ, BENCH=str(marks))
        subprocess.run(
            [skyc, "run", str(group), "--state-dir", str(state), "--network", network],
            env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        exit_ns = read_ns(marks / "exit")
        term_ns = read_ns(marks / "term")
        samples.append((term_ns - exit_ns) / 1e6)
        wait_idle(state)
    return samples


def kib(path, key):
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def skyc_binaries(skyc, state):
    """Real paths of skyc and of the node agent it installed in `state`."""
    agents = (state / "bin").glob("skyc-agent-*")
    return {os.path.realpath(skyc), *(os.path.realpath(a) for a in agents)}


def skyc_processes(binaries):
    """Pids of the processes running one of `binaries` (real paths)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            exe = os.path.realpath(entry / "exe")
        except OSError:
            continue
        if exe in binaries:
            pids.append(int(entry.name))
    return pids


def bench_memory(skyc, tmp, groups, network):
    tasks = "".join(f"---\nname: t{i}\nrun: sleep 600\n" for i in range(5))
    group = tmp / "mem.yaml"
    group.write_text("name: mem\nexecution: parallel\n" + tasks)
    state = tmp / "state-mem"
    t0 = time.time()
    for _ in range(groups):
        subprocess.run(
            [skyc, "run", "-d", str(group), "--state-dir", str(state), "--network", network],
            check=True, stdout=subprocess.DEVNULL,
        )
    submit = time.time() - t0
    status = json.loads(subprocess.run(
        [skyc, "status", "--all", "--json", "--state-dir", str(state)],
        check=True, capture_output=True, text=True).stdout)
    deadline = time.time() + 120
    while time.time() < deadline:
        status = json.loads(subprocess.run(
            [skyc, "status", "--all", "--json", "--state-dir", str(state)],
            check=True, capture_output=True, text=True).stdout)
        if all(g["status"] == "RUNNING" for g in status):
            break
        time.sleep(0.2)
    running = sum(g["status"] == "RUNNING" for g in status)
    supervisor = status[0]["supervisor_pid"]
    nodes = sum(1 for g in status for t in g["tasks"] for n in t["nodes"] if n["pid"])
    time.sleep(1)
    sup_rss = kib(f"/proc/{supervisor}/status", "VmRSS")
    sup_hwm = kib(f"/proc/{supervisor}/status", "VmHWM")
    # Every process of skyc's own (no `skyc status` runs now): the
    # supervisor and the agents, whatever their number.
    pids = skyc_processes(skyc_binaries(skyc, state))
    pss = {p: kib(f"/proc/{p}/smaps_rollup", "Pss") for p in pids}
    sup_pss = pss.pop(supervisor, 0)
    subprocess.run([skyc, "cancel", "--all", "--state-dir", str(state)],
                   check=True, stderr=subprocess.DEVNULL)
    wait_idle(state)
    return {
        "groups": groups, "running": running, "submit_s": submit, "nodes": nodes,
        "supervisor_rss_mib": sup_rss / 1024, "supervisor_peak_mib": sup_hwm / 1024,
        "supervisor_pss_kib": sup_pss, "others": len(pss), "others_pss_kib": sum(pss.values()),
    }


def bench_submit(skyc, tmp, groups, network):
    tasks = "".join(f"---\nname: t{i}\nrun: sleep 3600\n" for i in range(5))
    group = tmp / "sweep.yaml"
    group.write_text("name: sweep\nexecution: parallel\n" + tasks)
    state = tmp / "state-submit"
    # The machine is described as large enough that every group runs.
    env = dict(os.environ, SKYC_LOCAL_CPUS="1000000", SKYC_LOCAL_MEMORY_GB="1000000")
    step = max(groups // 10, 1)
    curve = []
    times = []
    for i in range(groups):
        t0 = time.perf_counter()
        subprocess.run(
            [skyc, "run", "-d", str(group), "--state-dir", str(state), "--network", network],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        )
        times.append((time.perf_counter() - t0) * 1000)
        if (i + 1) % step == 0:
            curve.append((i + 1 - step, statistics.mean(times)))
            times = []
    subprocess.run([skyc, "cancel", "--all", "--state-dir", str(state)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_idle(state)
    return curve


def report_submit(curve):
    print("submit   live groups before -> mean ms per `skyc run -d`")
    for live, ms in curve:
        print(f"         {live:6} -> {ms:6.1f}")
    first, last = curve[0][1], curve[-1][1]
    # Flatness is judged on a least-squares line through every tenth, not
    # on two tenths alone: on a shared 2-cpu machine one tenth can be off
    # by a quarter either way.
    xs = [live for live, _ in curve]
    ys = [ms for _, ms in curve]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    spread = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / spread if spread else 0.0
    start = my - slope * mx
    end = start + slope * xs[-1]
    flat = "met" if end <= 1.25 * start else "MISSED"
    fast = "met" if max(ys) <= 50 else "MISSED"
    print(f"         last/first {last / first:.2f}; fitted line {start:.1f} -> {end:.1f} ms, "
          f"{end / start if start > 0 else float('inf'):.2f}x (target <= 1.25x: {flat}); "
          f"slowest tenth {max(ys):.1f} ms (target <= 50 ms: {fast})")


def summary(name, samples, target):
    samples = sorted(samples)
    med = statistics.median(samples)
    p90 = samples[int(len(samples) * 0.9) - 1] if len(samples) >= 10 else samples[-1]
    verdict = "met" if med <= target else "MISSED"
    print(f"{name:8} median {med:7.1f} ms  p90 {p90:7.1f} ms  min {samples[0]:7.1f}  "
          f"max {samples[-1]:7.1f}  (n={len(samples)}; target <= {target} ms: {verdict})")


def report_memory(m):
    nodes = max(m["nodes"], 1)
    total = m["supervisor_pss_kib"] + m["others_pss_kib"]
    per_node = total / nodes
    verdict = "met" if per_node <= 100 else "MISSED"
    rss_verdict = "met" if m["supervisor_rss_mib"] <= 50 else "MISSED"
    print(f"memory   {m['running']}/{m['groups']} groups running ({m['nodes']} nodes), "
          f"submitted in {m['submit_s']:.1f} s")
    print(f"         skyc's processes: PSS {total / 1024:.1f} MiB, {per_node:.0f} KiB per node "
          f"(target <= 100 KiB: {verdict})")
    print(f"         supervisor PSS {m['supervisor_pss_kib'] / 1024:.1f} MiB "
          f"({m['supervisor_pss_kib'] / nodes:.0f} KiB per node); "
          f"{m['others']} agents PSS {m['others_pss_kib'] / 1024:.1f} MiB "
          f"({m['others_pss_kib'] / max(m['others'], 1):.0f} KiB each)")
    print(f"         supervisor RSS {m['supervisor_rss_mib']:.1f} MiB "
          f"(peak {m['supervisor_peak_mib']:.1f}; target <= 50 MB: {rss_verdict})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--groups", default=None,
                    help="groups of 5 nodes, comma-separated: each a memory benchmark "
                         "(default 20,100); the largest, the submit sweep (default 2000)")
    ap.add_argument("--network", default="auto")
    ap.add_argument("--only", choices=["start", "sigterm", "memory", "submit"])
    args = ap.parse_args()
    skyc = skyc_binary()
    tmp = Path(tempfile.mkdtemp(prefix="skyc-bench-"))
    try:
        print(f"skyc run benchmarks ({args.network} network, {os.cpu_count()} cpus)")
        if args.only in (None, "start"):
            summary("start", bench_start(skyc, tmp, args.runs, args.network), 100)
        if args.only in (None, "sigterm"):
            summary("sigterm", bench_sigterm(skyc, tmp, args.runs, args.network), 50)
        if args.only in (None, "memory"):
            for groups in (int(g) for g in (args.groups or "20,100").split(",")):
                report_memory(bench_memory(skyc, tmp, groups, args.network))
        if args.only in (None, "submit"):
            largest = max(int(g) for g in (args.groups or "2000").split(","))
            report_submit(bench_submit(skyc, tmp, largest, args.network))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
