#!/usr/bin/env python3
"""Startup time and peak RSS of the planner binary, against a baseline binary.

Issue 9: the planner (`headroom gpus`, `headroom fit ...`) must not load
LibTorch. This runs each command N times with each binary, alternating, and
prints the median wall time and the peak resident set (ru_maxrss of the child,
from wait4) of both, with their ratio baseline / current.

    bench/startup_bench.py --baseline OLD_HEADROOM [--current build/cli/headroom] [--runs 15]

The baseline is a headroom built from a commit before the trainer was split
out (e.g. 98c2427: `git worktree add /tmp/base 98c2427` and build it with
scripts/build.sh there); it needs its .venv's LibTorch to start.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = [["gpus"], ["fit", "llama-3-8b", "--gpu", "4090", "--qlora"]]


def run_once(binary, args):
    start = time.perf_counter()
    child = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"startup_bench: {binary} {' '.join(args)} exited {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_maxrss * 1024  # ru_maxrss is KiB on Linux


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="headroom binary before the split")
    parser.add_argument("--current", default="build/cli/headroom")
    parser.add_argument("--runs", type=int, default=15)
    options = parser.parse_args()
    for binary in (options.baseline, options.current):
        if not os.access(binary, os.X_OK):
            sys.exit(f"startup_bench: {binary}: not an executable")

    print(f"runs per command and binary: {options.runs} (alternating, after one warm-up each)")
    print(f"{'command':<42} {'baseline ms':>12} {'current ms':>11} {'speed-up':>9}"
          f" {'baseline MiB':>13} {'current MiB':>12} {'RSS ratio':>10}")
    for args in COMMANDS:
        samples = {options.baseline: [], options.current: []}
        for binary in samples:
            run_once(binary, args)  # page cache warm for both
        for _ in range(options.runs):
            for binary in samples:
                samples[binary].append(run_once(binary, args))
        base_ms = statistics.median(w for w, _ in samples[options.baseline]) * 1e3
        cur_ms = statistics.median(w for w, _ in samples[options.current]) * 1e3
        base_rss = max(r for _, r in samples[options.baseline]) / 2**20
        cur_rss = max(r for _, r in samples[options.current]) / 2**20
        print(f"{' '.join(args):<42} {base_ms:>12.1f} {cur_ms:>11.1f} {base_ms / cur_ms:>8.1f}x"
              f" {base_rss:>13.1f} {cur_rss:>12.1f} {base_rss / cur_rss:>9.1f}x")


if __name__ == "__main__":
    main()
