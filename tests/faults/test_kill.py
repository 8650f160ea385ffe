"""kill -9 of the whole process group of a daemon pass, at a random storage write of every service's action (the
crash hook of `tests/support/faults`); the next pass recovers: hudi-rs reads exactly the rows the completed writes
produced, no orphan data file, no temp file, nothing left pending, the metadata table in step with storage."""

from __future__ import annotations

import pytest

from tests.support.faults.harness import Harness
from tests.support.faults.tables import SERVICES

pytestmark = [pytest.mark.spark, pytest.mark.oracle, pytest.mark.slow]
KILLS = 5


@pytest.mark.parametrize("service", list(SERVICES))
def test_kill_9_at_random_writes_then_recovery(service: str, harness: Harness) -> None:
    fired = []
    for _ in range(3 * KILLS):  # a kill point after the last write lets the pass finish: those do not count
        result = harness.kill_trial(service)
        assert result.recovered, result.describe()
        assert result.findings.rows_lost == 0 and result.findings.rows_changed == 0
        if result.fired:
            fired.append(result.detail)
        if len(fired) == KILLS:
            break
    assert len(fired) == KILLS, f"only {len(fired)} kills landed mid-pass: {fired}"
