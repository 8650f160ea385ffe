"""Tables written by our write client read back exactly as a plain model of the writes says, in hudi-rs and in
our reader, at the end and as of every instant."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pytest

from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import ReadOptions, read
from tableservice.hudi.table.schema import avro_schema_from_arrow
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.create import MergeModeName, TableSpec, create_table
from tableservice.hudi.write.workload import TRIP_SCHEMA, Workload
from tableservice.storage import Storage
from tests.support.oracle import assert_same_rows, hudi_read
from tests.support.table_model import TableModel, table_rows

DATA_COLUMNS = TRIP_SCHEMA.names
CASES = [
    (v, tt, fmt, part, mode)
    for v, tt, fmt, part, mode in itertools.product(
        (6, 8, 9),
        (TableType.MERGE_ON_READ, TableType.COPY_ON_WRITE),
        ("avro", "parquet"),
        (True, False),
        (MergeModeName.EVENT_TIME_ORDERING, MergeModeName.COMMIT_TIME_ORDERING),
    )
    if not (tt is TableType.COPY_ON_WRITE and fmt == "parquet")
]


def _id(case: tuple[object, ...]) -> str:
    v, tt, fmt, part, mode = case
    assert isinstance(tt, TableType) and isinstance(mode, MergeModeName)
    return f"v{v}-{tt.value[:3]}-{fmt}-{'part' if part else 'nopart'}-{mode.value[:5]}"


@pytest.mark.oracle
@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_round_trip_matches_model(case: tuple[int, TableType, str, bool, MergeModeName], tmp_path: Path) -> None:
    version, table_type, block_format, partitioned, mode = case
    storage = Storage()
    path = str(tmp_path / "trips")
    create_table(
        storage,
        path,
        TableSpec(
            name="trips",
            table_type=table_type,
            version=version,
            schema=avro_schema_from_arrow(TRIP_SCHEMA, "trips_record", "hoodie.trips"),
            record_key_fields=("uuid",),
            partition_fields=("city",) if partitioned else (),
            ordering_fields=("ts",),
            merge_mode=mode,
        ),
    )
    client = WriteClient(storage, path, options=WriteOptions(max_file_records=70, log_block_format=block_format))
    event_time = mode is MergeModeName.EVENT_TIME_ORDERING
    model = TableModel("uuid", "city" if partitioned else None, "ts", event_time)
    history: list[tuple[str, list[dict[str, object]]]] = []
    workload = Workload(200, 4, update_fraction=0.3, delete_fraction=0.05, partitions=3, late_fraction=0.3, seed=11)
    for step in workload.steps():
        result = client.apply(step)
        model.upsert(step.records)
        if step.deletes is not None:
            model.delete(step.deletes)
        history.append((result.instant_time, model.snapshot(DATA_COLUMNS)))
    # An insert overwrite of one partition (or of the whole non-partitioned table).
    overwrite = next(iter(Workload(30, 1, partitions=1, seed=99).steps())).records
    if not partitioned:
        overwrite = overwrite.set_column(
            overwrite.schema.get_field_index("city"), "city", pa.array(["san_francisco"] * overwrite.num_rows)
        )
    result = client.insert_overwrite(overwrite)
    if partitioned:
        model.insert_overwrite(overwrite)
    else:
        model.rows = {}
        model.upsert(overwrite)
    history.append((result.instant_time, model.snapshot(DATA_COLUMNS)))

    table = HudiTable.open(storage, path)
    theirs = hudi_read(path)
    assert table_rows(theirs, DATA_COLUMNS, "uuid", "city" if partitioned else None) == history[-1][1]
    assert_same_rows(read(table), theirs, "final snapshot")
    for instant_time, expected in history:
        at = hudi_read(path, as_of=instant_time)
        assert table_rows(at, DATA_COLUMNS, "uuid", "city" if partitioned else None) == expected, instant_time
        assert_same_rows(read(table, ReadOptions(as_of=instant_time)), at, f"as of {instant_time}")
    if table_type is TableType.MERGE_ON_READ:
        before_overwrite = table.file_system_view(as_of=history[-2][0]).latest_slices()
        assert any(s.log_files for s in before_overwrite)
