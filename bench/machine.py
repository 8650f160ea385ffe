"""What this machine's cores give when two processes work at once: the ceiling that the two-core ratios of the other
benchmarks (`bench.compaction`'s `local[2]` / `local[1]`) are read against.

Usage: python -m bench.machine [--rounds 5] [--megabytes 128]

Two kinds of work, each run in rounds: once in one process alone, then in two processes at once (each doing the same
work as the one alone; with `sched_setaffinity`, each process on a core of its own):
- compute: sorting an array of 2M doubles (16 MB, mostly in cache) ten times;
- memory: gathering 4M random doubles from an array of `--megabytes` MB and copying half as many bytes, six times
  (what a merge's `take`, a row group's concatenation and a writer's pass over its buffers do).
Printed per kind: the CPU seconds of one process alone and of each of the two at once, and the speed-up of two
processes over one (2 x time alone / time of both), round by round and its median. A machine whose cores share
memory bandwidth (many VMs) shows the memory work at well below 2x; a Spark job's tasks, whose work is partly of
that kind, cannot scale past it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np


def _pin(core: int | None) -> None:
    if core is not None and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[core % len(cores)]})


def compute_work(core: int | None, megabytes: int) -> tuple[float, float]:
    """Sorting a cached array: (wall seconds, CPU seconds)."""
    _pin(core)
    values = np.random.default_rng(1).random(2_000_000)
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(10):
        np.sort(values)
    return time.perf_counter() - started, time.process_time() - cpu


def memory_work(core: int | None, megabytes: int) -> tuple[float, float]:
    """Random gathers from and copies of arrays far larger than the caches: (wall seconds, CPU seconds)."""
    _pin(core)
    rng = np.random.default_rng(2)
    values = rng.random(megabytes * 1024 * 1024 // 8)
    positions = rng.integers(0, len(values), 4_000_000)
    block = np.ones(megabytes * 1024 * 1024 // 2, np.uint8)
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(6):
        values.take(positions)
        block.copy()
    return time.perf_counter() - started, time.process_time() - cpu


WORK: dict[str, Callable[[int | None, int], tuple[float, float]]] = {"compute": compute_work, "memory": memory_work}


def _run(args: tuple[str, int | None, int]) -> tuple[float, float]:
    kind, core, megabytes = args
    return WORK[kind](core, megabytes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--megabytes", type=int, default=128, help="size of the memory work's array")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    print(f"{cores} cores; load average {os.getloadavg()[0]:.1f}", flush=True)
    if cores < 2:
        print("fewer than two cores: nothing to compare")
        return 0
    with multiprocessing.Pool(2) as pool:
        pool.map(_run, [("compute", 0, args.megabytes), ("compute", 1, args.megabytes)])  # both processes warm
        for kind in WORK:
            speedups = []
            for round_ in range(1, max(1, args.rounds) + 1):
                alone_wall, alone_cpu = pool.apply(_run, ((kind, 0, args.megabytes),))
                both = pool.map(_run, [(kind, 0, args.megabytes), (kind, 1, args.megabytes)])
                both_wall = max(wall for wall, _ in both)
                speedups.append(2 * alone_wall / both_wall)
                print(
                    f"{kind:7s} round {round_}: one process alone {alone_wall:.2f} s (CPU {alone_cpu:.2f} s); "
                    f"two at once {both_wall:.2f} s (CPU {both[0][1]:.2f} s and {both[1][1]:.2f} s); "
                    f"speed-up {speedups[-1]:.2f}",
                    flush=True,
                )
            print(
                f"{kind}: two processes over one, median {statistics.median(speedups):.2f}x "
                f"(rounds: {' '.join(f'{s:.2f}' for s in speedups)})",
                flush=True,
            )
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
