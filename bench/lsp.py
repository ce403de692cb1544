#!/usr/bin/env python3
"""Latency of `skyc lsp` (release build), driven as an editor drives it.

For each case the script starts the real server, initializes it, opens the
file, then sends full-text `didChange`s one at a time and measures from
writing each change to reading the `publishDiagnostics` of that version.
It also measures a completion request right after a change (the first
request of a version reads the file's tasks).

Usage: bench/lsp.py [--enforce] [--runs N] [--warmup N]
  --enforce   exit 1 when a target is missed (default: report only)
  --runs N    timed changes per case (default 50)
  --warmup N  untimed changes first (default 5)

Environment: SKYC_EXAMPLES_DIR (default ../shared/reference/skypilot-examples,
else tests/fixtures/skypilot-examples), CARGO_TARGET_DIR (absolute),
SKYC_BENCH_BIN (measure this skyc binary instead of building one).
"""

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS_MS = {"rlhf-math-jobgroup (5 tasks)": 10.0, "generated 1000 tasks x 8 nodes": 100.0}
TIMEOUT_S = 60


def generate(n):
    """A Job Group of n tasks, 8 nodes each: the same bytes as bench/check.sh's
    generator (and `generate_group` in compiler/benches/compile.rs)."""
    out = [f"---\nname: bench-{n}\nexecution: parallel\nprimary_tasks: [task-0]\ntermination_delay: 30s\n"]
    acc = ["H100:8", "A100-80GB:8", "L4:8"]
    for i in range(n):
        out.append(
            f"---\nname: task-{i}\nnum_nodes: 8\nresources:\n  cpus: 8+\n  memory: 64+\n"
            f"  accelerators: {acc[i % 3]}\n  infra: kubernetes\n"
        )
        out.append(
            "envs:\n  MODEL_NAME: Qwen/Qwen2.5-7B-Instruct\n"
            f"  PEER_HOST: task-{(7 * i + 12) % n}-3.${{SKYPILOT_JOBGROUP_NAME}}\n  BATCH_SIZE: 64\n"
        )
        out.append("setup: |\n  uv pip install torch transformers accelerate --system\n")
        out.append(f'run: |\n  echo "task-{i}: node ${{SKYPILOT_NODE_RANK}} of ${{SKYPILOT_NUM_NODES}}"\n')
        out.append(f'  HEAD="task-{i}-0.${{SKYPILOT_JOBGROUP_NAME}}:29500"\n')
        out.append(f'  NEXT="task-{(i + 1) % n}-3.${{SKYPILOT_JOBGROUP_NAME}}:8000"\n')
        out.append(f'  PREV="task-{(i + n - 1) % n}-7.${{SKYPILOT_JOBGROUP_NAME}}:8000"\n')
        out.append('  if [ "${SKYPILOT_NODE_RANK}" == "0" ]; then\n')
        out.append('    python train.py --head "$HEAD" --next "$NEXT" --prev "$PREV" \\\n')
        out.append('      --peer "$PEER_HOST" --batch-size "$BATCH_SIZE"\n')
        out.append("  else\n    sleep infinity\n  fi\n")
    return "".join(out)


class Server:
    """One `skyc lsp` process, spoken to over pipes."""

    def __init__(self, binary):
        self.proc = subprocess.Popen(
            [binary, "lsp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self.messages = queue.Queue()
        self.next_id = 1
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                line = line.strip()
                if not line:
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            self.messages.put(json.loads(out.read(length)))

    def send(self, message):
        body = json.dumps(message).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def notify(self, method, params):
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method, params):
        rid = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return self.wait(lambda m: m.get("id") == rid and "method" not in m)

    def wait(self, matches):
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                sys.exit("lsp.py: skyc lsp did not answer in time")
            message = self.messages.get(timeout=left)
            if matches(message):
                return message

    def close(self):
        self.request("shutdown", None)
        self.notify("exit", None)
        self.proc.stdin.close()
        self.proc.wait(timeout=TIMEOUT_S)


URI = "file:///bench/group.yaml"


def published(version):
    return lambda m: (
        m.get("method") == "textDocument/publishDiagnostics" and m["params"].get("version") == version
    )


def measure(binary, text, runs, warmup):
    """Milliseconds from didChange to publishDiagnostics, and to a
    completion answered right after a change, one list each."""
    server = Server(binary)
    server.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
    server.notify("initialized", {})
    server.notify(
        "textDocument/didOpen",
        {"textDocument": {"uri": URI, "languageId": "yaml", "version": 1, "text": text}},
    )
    server.wait(published(1))
    # The cursor after `primary_tasks: [`, where task names are offered.
    line = text[: text.index("primary_tasks: [")].count("\n")
    position = {"line": line, "character": len("primary_tasks: [")}
    diagnostics, completion = [], []
    version = 1
    for i in range(warmup + runs):
        version += 1
        # Alternate two texts of the same size, so every change is one.
        edited = text + ("# edit\n" if version % 2 else "#     \n")
        start = time.perf_counter_ns()
        server.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": URI, "version": version}, "contentChanges": [{"text": edited}]},
        )
        server.wait(published(version))
        took = (time.perf_counter_ns() - start) / 1e6
        start = time.perf_counter_ns()
        items = server.request(
            "textDocument/completion", {"textDocument": {"uri": URI}, "position": position}
        )["result"]
        took_completion = (time.perf_counter_ns() - start) / 1e6
        if not items:
            sys.exit("lsp.py: no task names offered in primary_tasks")
        if i >= warmup:
            diagnostics.append(took)
            completion.append(took_completion)
    server.close()
    return diagnostics, completion


def summary(samples):
    s = sorted(samples)
    p90 = s[min(len(s) - 1, int(len(s) * 0.9))]
    return statistics.median(s), p90, s[0], s[-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--enforce", action="store_true")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()

    binary = os.environ.get("SKYC_BENCH_BIN")
    if not binary:
        print("== cargo build --release", file=sys.stderr)
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
        target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
        binary = str(target / "release" / "skyc")

    examples = Path(os.environ.get("SKYC_EXAMPLES_DIR", ROOT.parent / "shared/reference/skypilot-examples"))
    if not examples.is_dir():
        examples = ROOT / "tests/fixtures/skypilot-examples"
    cases = [
        (
            "rlhf-math-jobgroup (5 tasks)",
            (examples / "rl-post-training-jobgroup__rlhf-math-jobgroup.yaml").read_text(),
        ),
        ("generated 100 tasks x 8 nodes", generate(100)),
        ("generated 1000 tasks x 8 nodes", generate(1000)),
    ]

    print(f"\nskyc lsp, release build: {args.runs} changes per case after {args.warmup} untimed\n")
    row = "{:<32} {:>5} {:>30} {:>30}  {:<11} {}"
    print(row.format("case", "KiB", "didChange→diagnostics ms", "completion after change ms", "target", "result"))
    print(row.format("", "", "median (p90, min-max)", "median (p90)", "", ""))
    misses = 0
    for name, text in cases:
        diagnostics, completion = measure(binary, text, args.runs, args.warmup)
        med, p90, lo, hi = summary(diagnostics)
        cmed, cp90, _, _ = summary(completion)
        target = TARGETS_MS.get(name)
        result = "-"
        if target is not None:
            result = "pass" if med <= target else "FAIL"
            misses += result == "FAIL"
        print(
            row.format(
                name,
                f"{len(text.encode()) / 1024:.0f}",
                f"{med:.2f} ({p90:.2f}, {lo:.2f}-{hi:.2f})",
                f"{cmed:.2f} ({cp90:.2f})",
                f"<= {target:g} ms" if target else "-",
                result,
            )
        )
    print()
    if misses:
        print(f"{misses} target(s) missed")
        return 1 if args.enforce else 0
    print("all targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
