#!/usr/bin/env python3
"""Whole-process benchmarks of pools on the local target (release build).

  submit    `skyc run --pool P --num-jobs 1000 -d` of a one-line job to a
            ready pool of 4 workers: the command's wall time (the jobs are
            recorded and the supervisor has taken them on when it returns),
            then the time until all 1,000 have ended.
  warm      `skyc run --pool P -d` of one job to a ready, idle worker, to
            the moment its `run` begins (the client's start included).
  memory    a pool of 16 ready workers: the proportional memory (PSS) of
            every skyc process (the supervisor and the node agents) per
            worker, beyond the supervisor with no pool.

Usage: bench/pools.py [--runs N] [--jobs N] [--workers N] [--only CASE]
Environment: SKYC_BENCH_BIN (a skyc binary; default: cargo build --release).
Targets: submit <= 1 s for 1,000 jobs, warm <= 100 ms.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from run import kib, read_ns, skyc_binaries, skyc_binary, skyc_processes, wait_idle  # noqa: E402

# Workers and jobs are placed by what they ask for; the machine is
# described so that the pools fit whatever the benchmark runs on.
MACHINE = {"SKYC_LOCAL_CPUS": "256", "SKYC_LOCAL_MEMORY_GB": "1024", "SKYC_LOCAL_GPUS": "0"}


class Pool:
    def __init__(self, skyc, tmp, name, workers, cpus):
        self.skyc, self.state, self.name = skyc, tmp / f"state-{name}", name
        self.env = dict(os.environ, **MACHINE)
        spec = tmp / f"{name}.yaml"
        spec.write_text(
            f"name: {name}\npool:\n  workers: {workers}\nresources:\n  cpus: {cpus}\n"
            "setup: echo ready\n"
        )
        self.skyc_run("pool", "apply", "-p", name, str(spec), "--network", "loopback")
        self.wait(lambda p: sum(w["status"] == "READY" for w in p["workers"]) == workers)

    def skyc_run(self, *args, env=None, capture=False):
        return subprocess.run(
            [self.skyc, *args, "--state-dir", str(self.state)],
            env=env or self.env, check=True, text=True,
            stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def status(self):
        out = self.skyc_run("pool", "status", self.name, "--json", capture=True).stdout
        return json.loads(out)[0]

    def wait(self, done, limit=300):
        deadline = time.time() + limit
        while time.time() < deadline:
            pool = self.status()
            if done(pool):
                return pool
            time.sleep(0.1)
        raise RuntimeError(f"pool {self.name}: timed out")

    def down(self):
        self.skyc_run("pool", "down", self.name)
        wait_idle(self.state)


def bench_submit(skyc, tmp, jobs):
    pool = Pool(skyc, tmp, "submit", 4, 4)
    job = tmp / "one.yaml"
    job.write_text(f'name: one\nresources:\n  cpus: 1\nrun: echo "$SKYPILOT_JOB_RANK" >> "{tmp}/ran"\n')
    t0 = time.time()
    ids = pool.skyc_run("run", "--pool", "submit", "--num-jobs", str(jobs), "-d", str(job),
                        capture=True).stdout.split()
    submit = time.time() - t0
    deadline = time.time() + 600
    ran = tmp / "ran"
    while time.time() < deadline:
        if ran.exists() and len(ran.read_text().splitlines()) >= jobs:
            break
        time.sleep(0.05)
    done = time.time() - t0
    pool.down()
    return {"jobs": len(ids), "submit_s": submit, "all_ended_s": done}


def bench_warm(skyc, tmp, runs):
    pool = Pool(skyc, tmp, "warm", 1, 1)
    job = tmp / "warm.yaml"
    job.write_text('name: warm\nrun: date +%s%N > "$BENCH/started"\n')
    samples = []
    for i in range(runs):
        marks = tmp / f"warm-{i}"
        marks.mkdir()
        env = dict(pool.env, BENCH=str(marks))
        t0 = time.time_ns()
        pool.skyc_run("run", "--pool", "warm", "-d", str(job), env=env)
        while not (marks / "started").exists():
            time.sleep(0.001)
        samples.append((read_ns(marks / "started") - t0) / 1e6)
        # The worker is idle again before the next job.
        pool.wait(lambda p: not any(w["jobs"] for w in p["workers"]), limit=30)
    pool.down()
    return samples


def bench_memory(skyc, tmp, workers):
    pool = Pool(skyc, tmp, "mem", workers, 1)
    time.sleep(1)
    pids = skyc_processes(skyc_binaries(skyc, pool.state))
    pss = {p: kib(f"/proc/{p}/smaps_rollup", "Pss") for p in pids}
    supervisor = int((pool.state / "supervisor.pid").read_text())
    sup_pss = pss.pop(supervisor, 0)
    pool.down()
    # The supervisor alone, with a group of one idle node for comparison.
    idle = tmp / "idle.yaml"
    idle.write_text("name: idle\nrun: sleep 600\n")
    state = tmp / "state-idle"
    subprocess.run([skyc, "run", "-d", str(idle), "--state-dir", str(state), "--network",
                    "loopback"], env=dict(os.environ, **MACHINE), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    base = int((state / "supervisor.pid").read_text())
    base_pss = kib(f"/proc/{base}/smaps_rollup", "Pss")
    subprocess.run([skyc, "cancel", "--all", "--state-dir", str(state)], check=True,
                   stderr=subprocess.DEVNULL)
    wait_idle(state)
    return {
        "workers": workers, "agents": len(pss), "agents_pss_kib": sum(pss.values()),
        "supervisor_pss_kib": sup_pss, "supervisor_alone_pss_kib": base_pss,
        "per_worker_kib": (sum(pss.values()) + max(sup_pss - base_pss, 0)) / workers,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--only", choices=["submit", "warm", "memory"])
    args = parser.parse_args()
    skyc = skyc_binary()
    with tempfile.TemporaryDirectory(prefix="skyc-bench-pools-") as tmp:
        tmp = Path(tmp)
        if args.only in (None, "submit"):
            r = bench_submit(skyc, tmp, args.jobs)
            verdict = "ok" if r["submit_s"] <= 1.0 else "MISSED"
            print(f"submit  {r['jobs']} jobs recorded and taken on in {r['submit_s']:.3f} s "
                  f"(target 1 s: {verdict}); all ended after {r['all_ended_s']:.2f} s")
        if args.only in (None, "warm"):
            s = bench_warm(skyc, tmp, args.runs)
            median = statistics.median(s)
            verdict = "ok" if median <= 100 else "MISSED"
            print(f"warm    median {median:.1f} ms, min {min(s):.1f}, max {max(s):.1f} "
                  f"over {len(s)} jobs (target 100 ms: {verdict})")
        if args.only in (None, "memory"):
            r = bench_memory(skyc, tmp, args.workers)
            print(f"memory  {r['workers']} workers: {r['agents']} agent processes, "
                  f"{r['agents_pss_kib']} KiB PSS; supervisor {r['supervisor_pss_kib']} KiB "
                  f"({r['supervisor_alone_pss_kib']} KiB with one group); "
                  f"{r['per_worker_kib']:.0f} KiB per worker")


if __name__ == "__main__":
    main()
