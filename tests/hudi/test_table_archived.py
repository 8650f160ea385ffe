"""Archived instants through HudiTable: listed from the archive, and log files of archived delta commits sliced
by their archived completion times."""

from __future__ import annotations

from pathlib import Path

import pytest

from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import read
from tableservice.hudi.table.schema import avro_schema_from_arrow
from tableservice.hudi.timeline.archive import archive_instants, read_archive_sources
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.create import TableSpec, create_table
from tableservice.hudi.write.workload import TRIP_SCHEMA, Workload
from tableservice.storage import Storage
from tests.support.oracle import assert_same_rows, hudi_read


@pytest.mark.oracle
@pytest.mark.parametrize("version", [6, 8, 9])
def test_archived_instants_leave_reads_unchanged(version: int, tmp_path: Path) -> None:
    storage = Storage()
    path = str(tmp_path / "t")
    create_table(
        storage,
        path,
        TableSpec(
            name="t",
            table_type=TableType.MERGE_ON_READ,
            version=version,
            schema=avro_schema_from_arrow(TRIP_SCHEMA, "t_record", "hoodie.t"),
            record_key_fields=("uuid",),
            ordering_fields=("ts",),
        ),
    )
    client = WriteClient(storage, path, options=WriteOptions(max_file_records=200))
    for step in Workload(200, 5, 0.3, 0.02, partitions=0).steps():
        client.apply(step)
    table = HudiTable.open(storage, path)
    before = read(table)
    completed = table.timeline().completed().instants
    oldest = completed[:2]
    archive_instants(storage, path, table.config, read_archive_sources(storage, path, table.config, oldest))
    for instant in oldest:
        table.active.delete_completed(instant)
    table = HudiTable.open(storage, path)
    assert [i.requested_time for i in table.timeline()] == [i.requested_time for i in completed[2:]]
    archived = table.archived_instants(completed_only=True)
    assert [i.requested_time for i in archived] == [i.requested_time for i in oldest]
    if version >= 8:
        assert [table.archived_completion_time(i.requested_time) for i in oldest] == [i.completion_time for i in oldest]
    assert_same_rows(read(table), before, "after archival")
    assert_same_rows(hudi_read(path), before, "hudi-rs after archival")
