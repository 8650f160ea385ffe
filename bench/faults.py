"""The fault harness at scale: kill -9 trials for every service (and, as they land, the other fault classes),
each followed by a recovery pass and the checks of `tests/support/faults`; prints the table of outcomes.

    python -m bench.faults --trials 100 [--services compaction,clean] [--faults kill] [--seed 1]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable

from bench.common import bench_dir
from tests.support.faults.disk_and_damage import READERS, damage_trial, enospc_trial
from tests.support.faults.harness import Harness, TrialResult, lazy_executor
from tests.support.faults.report import print_table
from tests.support.faults.tables import SERVICES

FAULTS: dict[str, Callable[[Harness, str], TrialResult]] = {
    "kill": Harness.kill_trial,
    "enospc": enospc_trial,
    "damage": damage_trial,  # only for the services that read committed data files (READERS)
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.faults")
    parser.add_argument("--trials", type=int, default=100, help="trials per service and fault class")
    parser.add_argument("--services", default=",".join(SERVICES))
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    root = bench_dir("faults")
    shutil.rmtree(root, ignore_errors=True)
    started = time.monotonic()
    with lazy_executor() as executor:
        harness = Harness(root, executor, seed=args.seed)
        for service in args.services.split(","):
            for fault in args.faults.split(","):
                if fault == "damage" and service not in READERS:
                    continue
                for _ in range(args.trials):
                    result = FAULTS[fault](harness, service)
                    mark = "ok " if result.recovered else "BAD"
                    print(f"{mark} {result.describe()}", flush=True)
                shutil.rmtree(root / "trials", ignore_errors=True)  # keep the disk small between cells
    print_table(harness.results)
    print(f"{len(harness.results)} trials in {time.monotonic() - started:.0f}s")
    return 0 if all(r.recovered for r in harness.results) else 1


if __name__ == "__main__":
    sys.exit(main())
