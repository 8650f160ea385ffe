"""A full disk mid-action (the table on a small tmpfs) and damaged committed files."""

from __future__ import annotations

import os

import pytest

from tests.support.faults.disk_and_damage import damage_trial, enospc_trial
from tests.support.faults.harness import Harness

pytestmark = [pytest.mark.oracle, pytest.mark.slow]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
@pytest.mark.parametrize("service", ["clean", "rollback", "archival", "metadata"])
def test_disk_full_during_the_action_then_recovery(service: str, harness: Harness) -> None:
    for _ in range(2):
        result = enospc_trial(harness, service)
        assert result.recovered, result.describe()


@pytest.mark.spark
@pytest.mark.parametrize("service", ["compaction", "clustering"])
def test_damaged_committed_file_stops_the_action_naming_it(service: str, harness: Harness) -> None:
    result = damage_trial(harness, service)
    assert result.expected_error, result.describe()
    assert result.named_file, result.describe()
    assert result.unchanged, result.describe()
