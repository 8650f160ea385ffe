"""S3 faults (connection resets, 500, 503 SlowDown, timeouts, bodies cut short) between a daemon pass and the
moto server, through the fault proxy of `tests/support/faults/s3_proxy.py`: the pass succeeds or stops with a
typed error, the next pass (no faults) recovers, and hudi-rs, reading straight from moto, finds exactly the rows
the completed writes produced; nothing is left pending, no orphan file, the metadata table in step."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.faults.harness import Harness, lazy_executor
from tests.support.faults.report import print_table
from tests.support.faults.s3_faults import S3Env, s3_env, s3_trial
from tests.support.faults.s3_proxy import KINDS
from tests.support.servers import MotoServer

pytestmark = [pytest.mark.moto, pytest.mark.oracle, pytest.mark.slow]
SERVICES = ("clean", "rollback", "archival", "metadata")  # the services that run no Spark job
TRIALS = 2


@pytest.fixture(scope="module")
def s3(moto: MotoServer) -> Iterator[S3Env]:
    with s3_env(moto, bucket="s3-faults") as env:
        yield env


@pytest.fixture(scope="module")
def s3_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    """A harness of its own: these services' recovery passes run no Spark job, so no SparkSession is started."""
    with lazy_executor() as executor:
        h = Harness(Path(tmp_path_factory.mktemp("s3-faults")), executor, seed=21)
        yield h
        print_table(h.results)


@pytest.mark.parametrize("kind", KINDS)
def test_s3_fault_then_recovery(kind: str, s3_harness: Harness, s3: S3Env) -> None:
    """Two trials per kind, the services taken in turn (every service meets several kinds); hudi-rs reads the first
    trial's table from the bucket too (it takes seconds), the second's from its byte copy."""
    offset = KINDS.index(kind) * TRIALS
    for n in range(TRIALS):
        service = SERVICES[(offset + n) % len(SERVICES)]
        result = s3_trial(s3_harness, s3, service, kind, short=True, read_s3=n == 0)
        assert result.fired, result.describe()
        assert result.typed, result.describe()
        assert result.child_rc == 0 or result.child_error, result.describe()  # a failed pass says why
        assert result.recovered, result.describe()
        f = result.findings
        assert (f.rows_lost, f.rows_duplicated, f.rows_changed, f.pending, f.orphans) == (0, 0, 0, [], [])
