"""The fault harness at scale: kill -9, full disk, damaged files and S3 faults for every service, each trial
followed by a recovery pass and the checks of `tests/support/faults`; prints the table of outcomes.

    python -m bench.faults --trials 100 [--services compaction,clean] [--faults kill,s3] [--seed 1]

`s3` runs the table on a moto server of its own behind the fault proxy; its trials take the fault kinds (reset,
500, 503, timeout, cut) in turn, so `--trials 10` gives each kind two trials per service.
`zk` runs the passes under the ZooKeeper lock of a ZooKeeper server of its own, killed (SIGKILL) or hung (SIGSTOP)
in turn at a storage write (of the commit section or any, at random); needs Debian's ZooKeeper jars and a JDK.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bench.common import bench_dir
from tests.support.faults.disk_and_damage import READERS, damage_trial, enospc_trial
from tests.support.faults.harness import Harness, TrialResult, lazy_executor
from tests.support.faults.report import print_table
from tests.support.faults.s3_faults import S3Env, s3_env, s3_trial
from tests.support.faults.s3_proxy import KINDS
from tests.support.faults.tables import SERVICES
from tests.support.faults.zk_faults import SIGNALS, zk_trial
from tests.support.zk.server import ZooKeeperServer

FAULTS: dict[str, Callable[[Harness, str], TrialResult]] = {
    "kill": Harness.kill_trial,
    "enospc": enospc_trial,
    "damage": damage_trial,  # only for the services that read committed data files (READERS)
}
S3 = "s3"  # needs the moto server and the proxy: see `_s3_trials`
S3_SERVICES = ("clean", "archival", "rollback", "metadata", "compaction")
ZK = "zk"  # needs a ZooKeeper server: see `_zk_trials`
ZK_SERVICES = ("clean", "archival", "rollback", "metadata")


def _in_turn(
    kinds: Sequence[str], trial: Callable[[Harness, str, str], TrialResult]
) -> Iterator[Callable[[Harness, str], TrialResult]]:
    """The trials of one cell: `trial(harness, service, kind)` with the kinds in turn."""
    for kind in itertools.cycle(kinds):
        yield functools.partial(_with_kind, trial, kind)


def _with_kind(trial: Callable[[Harness, str, str], TrialResult], kind: str, h: Harness, service: str) -> TrialResult:
    return trial(h, service, kind)


def _zk_trials(server: ZooKeeperServer) -> Iterator[Callable[[Harness, str], TrialResult]]:
    """The ZooKeeper trials of one cell, the signals in turn."""
    return _in_turn(SIGNALS, lambda h, service, name: zk_trial(h, server, service, name))


@contextmanager
def _zk_server(folder: Path) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(folder)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _s3_trials(env: S3Env) -> Iterator[Callable[[Harness, str], TrialResult]]:
    """The S3 trials of one cell, the fault kinds in turn."""
    return _in_turn(KINDS, lambda h, service, kind: s3_trial(h, env, service, kind))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.faults")
    parser.add_argument("--trials", type=int, default=100, help="trials per service and fault class")
    parser.add_argument("--services", default=",".join(SERVICES))
    parser.add_argument("--faults", default=",".join([*FAULTS, S3, ZK]))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    root = bench_dir("faults")
    shutil.rmtree(root, ignore_errors=True)
    started = time.monotonic()
    faults = args.faults.split(",")
    with ExitStack() as stack:
        executor = stack.enter_context(lazy_executor())
        env = stack.enter_context(s3_env()) if S3 in faults else None
        zk = stack.enter_context(_zk_server(root / "zookeeper")) if ZK in faults else None
        harness = Harness(root, executor, seed=args.seed)
        for service in args.services.split(","):
            for fault in faults:
                if (
                    (fault == "damage" and service not in READERS)
                    or (fault == S3 and service not in S3_SERVICES)
                    or (fault == ZK and service not in ZK_SERVICES)
                ):
                    continue
                trials = _s3_trials(env) if env is not None and fault == S3 else None
                trials = _zk_trials(zk) if zk is not None and fault == ZK else trials
                for _ in range(args.trials):
                    trial = next(trials) if trials is not None else FAULTS[fault]
                    result = trial(harness, service)
                    mark = "ok " if result.ok else "BAD"
                    print(f"{mark} {result.describe()}", flush=True)
                shutil.rmtree(root / "trials", ignore_errors=True)  # keep the disk small between cells
    print_table(harness.results)
    print(f"{len(harness.results)} trials in {time.monotonic() - started:.0f}s")
    return 0 if all(r.ok for r in harness.results) else 1


if __name__ == "__main__":
    sys.exit(main())
