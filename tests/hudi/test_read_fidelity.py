"""Our reads of every real table equal hudi-rs's, value for value: snapshot, read-optimized, time travel to every
completed instant, incremental, column and partition pruning."""

from __future__ import annotations

import itertools

import pytest

from tableservice.errors import PermanentError
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import ReadOptions, partition_values, read
from tableservice.storage import Storage
from tests.support.fixtures import fixture_names, fixture_table_readonly
from tests.support.oracle import assert_same_rows, hudi_read

NAMES = fixture_names()
pytestmark = pytest.mark.oracle


def _open(name: str) -> tuple[str, HudiTable]:
    if name == "none":
        pytest.skip("no fixtures")
    path = str(fixture_table_readonly(name))
    return path, HudiTable.open(Storage(), path)


@pytest.mark.parametrize("name", NAMES or ["none"])
def test_snapshot_and_read_optimized(name: str) -> None:
    path, table = _open(name)
    assert_same_rows(read(table), hudi_read(path), "snapshot")
    assert_same_rows(read(table, ReadOptions(read_optimized=True)), hudi_read(path, read_optimized=True), "RO")


@pytest.mark.parametrize("name", NAMES or ["none"])
def test_time_travel_to_every_completed_instant(name: str) -> None:
    path, table = _open(name)
    for instant in table.timeline().completed_writes():
        t = instant.requested_time
        assert_same_rows(read(table, ReadOptions(as_of=t)), hudi_read(path, as_of=t), f"as of {t}")


@pytest.mark.parametrize("name", NAMES or ["none"])
def test_incremental_between_consecutive_instants(name: str) -> None:
    path, table = _open(name)
    times = [i.requested_time for i in table.timeline().completed_writes()]
    for start, end in itertools.pairwise(times):
        ours = read(table, ReadOptions(start=start, end=end))
        theirs = hudi_read(path, start=start, end=end)
        assert_same_rows(ours, theirs, f"incremental ({start}, {end}]")


@pytest.mark.parametrize("name", [n for n in NAMES if "empty" not in n] or ["none"])
def test_column_pruning(name: str) -> None:
    path, table = _open(name)
    full = read(table)
    columns = ["_hoodie_record_key", full.column_names[-1], full.column_names[6]]
    ours = read(table, ReadOptions(columns=tuple(columns)))
    assert ours.column_names == columns
    assert_same_rows(ours, full.select(columns), "projection")
    assert_same_rows(ours, hudi_read(path, columns=columns), "projection vs hudi-rs")


@pytest.mark.parametrize("name", [n for n in NAMES if "empty" not in n] or ["none"])
def test_partition_pruning(name: str) -> None:
    _, table = _open(name)
    fields = table.config.partition_fields
    full = read(table)
    if not fields:
        return
    partitions = sorted(set(full.column("_hoodie_partition_path").to_pylist()))
    first = partition_values(table.config, partitions[0])[fields[0]]
    pruned = read(table, ReadOptions(filters=((fields[0], "=", first),)))
    expected_rows = [
        r for r in full.to_pylist() if partition_values(table.config, r["_hoodie_partition_path"])[fields[0]] == first
    ]
    assert pruned.num_rows == len(expected_rows) > 0
    assert sorted(pruned.column("_hoodie_record_key").to_pylist()) == sorted(
        r["_hoodie_record_key"] for r in expected_rows
    )


def test_filter_on_non_partition_field_is_rejected() -> None:
    _, table = _open(NAMES[0] if NAMES else "none")
    with pytest.raises(PermanentError, match="only partition fields"):
        read(table, ReadOptions(filters=(("no_such_field", "=", "1"),)))
