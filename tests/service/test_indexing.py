"""The indexing service on generated tables of versions 6, 8 and 9, COW and MOR, without the partitions it builds:
a plan scheduled from the `indexing` policy, executed with record keys read on Spark; then `verify` passes, every
built partition equals a rebuild from scratch, and the record index maps every key to the file group hudi-rs
reports for it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tableservice.hudi.metadata.initialize import initialize_metadata_table
from tableservice.hudi.metadata.keys import secondary_index_key
from tableservice.hudi.metadata.record_index import file_id_of
from tableservice.hudi.metadata.verify import verify_metadata_table
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.locks import InProcessLockProvider, LockHandle
from tableservice.metrics import new_metrics
from tableservice.planning.indexing.policy import IndexingPolicy
from tableservice.service.actions import TableContext
from tableservice.service.indexing import IndexingService
from tableservice.service.protocol import ServiceSettings
from tableservice.service.table_state import TableSettings
from tableservice.service.table_worker import TableWorker
from tableservice.storage import Storage
from tests.support.metadata_table import partition_records
from tests.support.oracle import hudi_read
from tests.support.trip_tables import create_trip_table

pytestmark = [pytest.mark.spark, pytest.mark.oracle]


def _ctx(path: str, executor: Any) -> TableContext:
    table = HudiTable.open(Storage(), path)
    return TableContext(table=table, lock=InProcessLockProvider().table_lock(table.name, path), executor=executor)


def _without_file_names(records: dict[str, Any]) -> dict[str, Any]:
    return {k: {f: v for f, v in r.items() if f != "_hoodie_file_name"} for k, r in records.items()}


@pytest.mark.parametrize(
    ("version", "table_type"), [(v, t) for v in (6, 8, 9) for t in ("MERGE_ON_READ", "COPY_ON_WRITE")]
)
def test_indexing_builds_what_the_policy_names(
    version: int, table_type: str, tmp_path: Path, spark_executor: Any
) -> None:
    path = str(tmp_path / "t")
    create_trip_table(path, version, TableType(table_type))
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=60))
    steps = list(Workload(300, 5, 0.3, 0.05, partitions=2, seed=8).steps())
    for step in steps:
        client.apply(step)
    policy = IndexingPolicy.from_mapping(
        {
            "hoodie.metadata.record.index.enable": "true",
            "hoodie.metadata.index.column.stats.enable": "true",
            "hoodie.metadata.index.bloom.filter.enable": "true",
            "hoodie.metadata.index.partition.stats.enable": "true",
        }
    )
    secondary = {"rider_idx": "rider"} if version >= 8 else {}
    service = IndexingService(ServiceSettings(policy), secondary)
    ctx = _ctx(path, spark_executor)
    assert service.due(ctx.table.snapshot())
    instant = service.schedule(ctx)
    assert instant is not None and instant.action is Action.INDEXING
    assert service.schedule(_ctx(path, spark_executor)) is None  # planned already
    outcome = service.execute(_ctx(path, spark_executor), instant, lease=LockHandle("lease", "test"))
    table = HudiTable.open(Storage(), path)
    expected = ["files", "column_stats", "bloom_filters", "record_index"]
    if version >= 8:
        expected += ["partition_stats", "secondary_index_rider_idx"]
    assert sorted(table.config.metadata_partitions) == sorted(expected)
    assert table.config.metadata_partitions_inflight == ()
    done = table.timeline().get(instant.requested_time, Action.INDEXING)
    assert done is not None and done.is_completed
    assert not service.due(table.snapshot())
    assert [str(d) for d in verify_metadata_table(table)] == []
    rows = hudi_read(path)
    assert outcome.records_written > rows.num_rows  # record index and more

    # the record index: every key -> the file group hudi-rs read it from
    index = partition_records(path, "record_index")
    keys = rows.column("_hoodie_record_key").to_pylist()
    names = rows.column("_hoodie_file_name").to_pylist()
    parts = rows.column("_hoodie_partition_path").to_pylist()
    assert sorted(index) == sorted(keys)
    for key, name, part in zip(keys, names, parts, strict=True):
        loc = index[key]["recordIndexMetadata"]
        assert loc["partitionName"] == part
        assert _file_id(loc) == file_id_of(name), key
    if secondary:
        got = set(partition_records(path, "secondary_index_rider_idx"))
        riders = rows.column("rider").to_pylist()  # text: held as it is
        assert got == {secondary_index_key(r, k) for r, k in zip(riders, keys, strict=True)}

    # every other partition equals a rebuild from scratch
    built = {p: _without_file_names(partition_records(path, p)) for p in expected if not p.startswith("secondary")}
    rebuilt = str(tmp_path / "rebuilt")
    shutil.copytree(path, rebuilt)
    shutil.rmtree(Path(rebuilt) / ".hoodie" / "metadata")
    props = Path(rebuilt) / ".hoodie" / "hoodie.properties"
    props.write_text("".join(line for line in props.read_text().splitlines(True) if "metadata.partitions" not in line))
    initialize_metadata_table(HudiTable.open(Storage(), rebuilt), [p for p in built if p != "files"])
    for partition, records in built.items():
        again = _without_file_names(partition_records(rebuilt, partition))
        assert again == records, partition  # record-index instants: both read in this process's time zone


def _file_id(loc: dict[str, Any]) -> str:
    if loc["fileIdEncoding"] == 1:
        return str(loc["fileId"])
    import uuid

    high, low = loc["fileIdHighBits"] % (1 << 64), loc["fileIdLowBits"] % (1 << 64)
    return f"{uuid.UUID(int=(high << 64) | low)}-{loc['fileIndex']}"


def test_a_pass_builds_the_indexes_the_policy_names_and_counts_them(tmp_path: Path, spark_executor: Any) -> None:
    path = str(tmp_path / "t")
    create_trip_table(path, 8, TableType.MERGE_ON_READ)
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=60))
    for step in Workload(150, 2, 0.3, 0.0, partitions=2, seed=15).steps():
        client.apply(step)
    metrics = new_metrics(process_metrics=False)
    policy = IndexingPolicy.from_mapping({"hoodie.metadata.record.index.enable": "true"})
    settings = TableSettings(uri=path, name="trips", indexing=ServiceSettings(policy), secondary_indexes={"r": "rider"})
    worker = TableWorker(settings, Storage(), InProcessLockProvider(), spark_executor, metrics)
    result = worker.run_pass()
    assert not result.failed, result.failed
    (done,) = result.indexed
    assert done.partitions == ("files", "record_index", "secondary_index_r")
    assert sorted(HudiTable.open(Storage(), path).config.metadata_partitions) == list(done.partitions)
    text = metrics.render()[0].decode()
    assert f'tableservice_written_records_total{{action="indexing",table="trips"}} {float(done.records)}' in text
    assert 'tableservice_actions_completed_total{action="indexing",table="trips"} 1.0' in text
    again = worker.run_pass()  # built: nothing more to schedule
    assert not again.indexed and not again.scheduled
