"""Fuzz every parser of untrusted bytes with a deterministic byte mutator (no hypothesis: fast and reproducible).

Usage: python -m bench.fuzz [--cases 100000] [--seed 1] [--only log_file,hfile] [--timeout 10] [--no-fixtures]

Parsers and seeds are those of `tests.support.fuzz_targets` (fixture tables, tables our write client writes, our
encoders' output); mutations are `tests.support.fuzz_mutators.random_ops` (bit flips, truncation, inserted and
deleted runs, length fields set to huge or negative values, splices, random bytes). Cases are spread over the
parsers evenly. Every case must decode or raise a TableServiceError; anything else (or a case running past
`--timeout` seconds) is reported (the first per parser) with the input as hex and its traceback, and the run
exits with status 1.
Prints per parser: cases, decoded, typed errors, other exceptions, the slowest case; and the peak RSS.
"""

from __future__ import annotations

import argparse
import logging
import random
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from types import FrameType

from bench.common import bench_dir, peak_rss_mb
from tableservice.errors import TableServiceError
from tests.support.fuzz_mutators import apply_ops, random_ops
from tests.support.fuzz_targets import Target, build_targets


class CaseTimeout(Exception):
    """A case ran past the time limit (a hang)."""


@dataclass
class Tally:
    cases: int = 0
    decoded: int = 0
    typed: int = 0
    other: int = 0
    slowest: float = 0.0
    slowest_case: int = -1


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise CaseTimeout("case ran past the time limit")


def _report(target: Target, case: int, seed_index: int, data: bytes, exc: BaseException) -> None:
    print(f"\n=== {target.name}: case {case} (seed {seed_index}, {len(data)} bytes) raised {type(exc).__name__}")
    print(f"input hex: {data.hex()}")
    print("".join(traceback.format_exception(exc)), flush=True)


def run(targets: list[Target], cases: int, seed: int, timeout: float) -> dict[str, Tally]:
    rng = random.Random(seed)
    tallies = {t.name: Tally() for t in targets}
    reported: set[str] = set()
    signal.signal(signal.SIGALRM, _alarm)
    active = [t for t in targets if t.seeds]
    for case in range(cases):
        target = active[case % len(active)]
        tally = tallies[target.name]
        index = rng.randrange(len(target.seeds))
        seed_bytes = target.seeds[index]
        data = apply_ops(seed_bytes, random_ops(rng, len(seed_bytes)), target.seeds)
        tally.cases += 1
        started = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            target.parse(index, data)
            tally.decoded += 1
        except TableServiceError:
            tally.typed += 1
        except (Exception, RecursionError, MemoryError) as exc:
            tally.other += 1
            if target.name not in reported:
                _report(target, case, index, data, exc)
                reported.add(target.name)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        elapsed = time.perf_counter() - started
        if elapsed > tally.slowest:
            tally.slowest, tally.slowest_case = elapsed, case
    return tallies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated parser names")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds one case may take")
    parser.add_argument("--no-fixtures", action="store_true", help="only generated seeds")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # readers log every corrupt block they skip

    targets = build_targets(bench_dir("fuzz"), use_fixtures=not args.no_fixtures)
    if args.only:
        wanted = set(args.only.split(","))
        targets = [t for t in targets if t.name in wanted]
    print(f"parsers: {', '.join(f'{t.name} ({len(t.seeds)} seeds)' for t in targets)}", flush=True)
    started = time.monotonic()
    tallies = run(targets, args.cases, args.seed, args.timeout)
    seconds = time.monotonic() - started
    print(f"\n{'parser':18s} {'cases':>8s} {'decoded':>8s} {'typed err':>9s} {'other':>6s} {'slowest':>9s}  case")
    for name, t in tallies.items():
        print(
            f"{name:18s} {t.cases:8d} {t.decoded:8d} {t.typed:9d} {t.other:6d} {t.slowest * 1000:7.1f}ms  "
            f"{t.slowest_case}"
        )
    total = sum(t.cases for t in tallies.values())
    other = sum(t.other for t in tallies.values())
    print(f"\n{total} cases in {seconds:.1f} s ({total / seconds:.0f}/s), seed {args.seed}")
    print(f"peak RSS of this process: {peak_rss_mb():.0f} MiB")
    print(f"other exceptions: {other}")
    return 1 if other else 0


if __name__ == "__main__":
    sys.exit(main())
