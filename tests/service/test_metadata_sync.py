"""Services on real tables with a metadata table: every action the daemon commits updates the metadata table
first, readers see the same rows through it as through a storage listing, and `verify` finds it in step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tableservice.hudi.action.clean import execute_clean, schedule_clean
from tableservice.hudi.metadata.compaction import metadata_compaction_due
from tableservice.hudi.metadata.initialize import initialize_metadata_table
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.metadata.verify import verify_metadata_table
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Instant
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import TRIP_SCHEMA, Workload
from tableservice.locks import InProcessLockProvider
from tableservice.planning.clean.plan import CleanPlanner
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.clustering.policy import ClusteringPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.planning.metadata.policy import MetadataPolicy
from tableservice.service.actions import TableContext
from tableservice.service.clustering import execute_clustering, schedule_clustering
from tableservice.service.compaction import execute_compaction, schedule_compaction
from tableservice.service.metadata import maintain_metadata_table
from tableservice.storage import Storage
from tests.support.fixtures import fixture_table, metadata_fixture_names
from tests.support.oracle import assert_same_rows, hudi_read, listing_view
from tests.support.table_model import TableModel, table_rows
from tests.support.trip_tables import create_trip_table

pytestmark = [pytest.mark.spark, pytest.mark.oracle]
NAMES = metadata_fixture_names() or ["none"]
FILE_NAME = "_hoodie_file_name"


def _ctx(path: str, executor: Any) -> TableContext:
    table = HudiTable.open(Storage(), path)
    return TableContext(table=table, lock=InProcessLockProvider().table_lock(table.name, path), executor=executor)


def _check_in_step(path: str, expected_rows: Any, tmp_path: Path, step: str, instant: Instant | None) -> None:
    table = HudiTable.open(Storage(), path)
    timeline = table.timeline()
    assert [str(d) for d in verify_metadata_table(table, timeline)] == [], step
    # hudi-rs reads through the files partition; the listing view makes it list storage instead: the two reads
    # agree row for row (file names included), and equal the table's rows before (file names change on rewrite)
    through_mdt = hudi_read(path)
    view = listing_view(path, tmp_path / f"view-{step}")
    assert_same_rows(through_mdt, hudi_read(str(view)), f"{step}: metadata listing vs storage listing")
    assert_same_rows(through_mdt.drop_columns([FILE_NAME]), expected_rows.drop_columns([FILE_NAME]), step)
    if instant is None:
        return
    done = timeline.get(instant.requested_time)
    assert done is not None and done.is_completed, step
    mdt = MetadataTable.open(table, timeline)
    assert mdt is not None
    mdt_instant = mdt.mdt_timeline.get(instant.requested_time)
    assert mdt_instant is not None and mdt_instant.is_completed, f"{step}: no metadata instant"
    if table.config.version >= 8:  # version 6 timelines keep no completion times
        assert mdt_instant.completion_time is not None and done.completion_time is not None
        assert mdt_instant.completion_time < done.completion_time, f"{step}: data completed before its metadata"


@pytest.mark.parametrize("name", NAMES)
def test_services_keep_the_metadata_table_in_step(name: str, tmp_path: Path, spark_executor: Any) -> None:
    if name == "none":
        pytest.skip("no fixtures with a metadata table")
    path = str(fixture_table(name, tmp_path))
    rows = hudi_read(path)
    _check_in_step(path, rows, tmp_path, "fixture", None)
    ran = []

    mor = HudiTable.open(Storage(), path).config.is_mor
    compaction = schedule_compaction(_ctx(path, spark_executor), CompactionPolicy(), force=True) if mor else None
    if compaction is not None:
        execute_compaction(_ctx(path, spark_executor), compaction.requested_time)
        _check_in_step(path, rows, tmp_path, "compaction", compaction)
        ran.append("compaction")

    policy = ClusteringPolicy.from_mapping(
        {
            "tableservice.clustering.enabled": "true",
            "hoodie.clustering.plan.strategy.small.file.limit": str(1 << 30),
            "hoodie.clustering.plan.strategy.target.file.max.bytes": str(1 << 31),
        }
    )
    clustering = schedule_clustering(_ctx(path, spark_executor), policy, force=True)
    if clustering is not None:
        execute_clustering(_ctx(path, spark_executor), clustering.requested_time, policy)
        _check_in_step(path, rows, tmp_path, "clustering", clustering)
        ran.append("clustering")

    table = HudiTable.open(Storage(), path)
    # one file version: the slices compaction superseded and the file groups clustering replaced go
    planner = CleanPlanner(
        CleanPolicy.from_mapping(
            {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.cleaner.fileversions.retained": "1"}
        )
    )
    clean = schedule_clean(table, planner, force=True)
    if clean is not None:
        execute_clean(table, clean)
        _check_in_step(path, rows, tmp_path, "clean", clean)
        ran.append("clean")
    assert "clustering" in ran and "clean" in ran, ran
    # The metadata service, as it would run after these actions, compacts the metadata table once enough delta
    # commits accumulated (5 here) and leaves it in step; a table below the threshold is left as it is.
    policy_5 = MetadataPolicy(compact_max_delta_commits=5)
    table = HudiTable.open(Storage(), path)
    mdt = MetadataTable.open(table, table.timeline())
    assert mdt is not None
    waiting = metadata_compaction_due(mdt, 5).delta_commits
    done = maintain_metadata_table(table, policy_5)
    assert (done.compaction is not None) == (waiting >= 5), waiting
    table = HudiTable.open(Storage(), path)
    mdt = MetadataTable.open(table, table.timeline())
    assert mdt is not None
    assert metadata_compaction_due(mdt, 5).delta_commits == (0 if waiting >= 5 else waiting)
    _check_in_step(path, rows, tmp_path, "metadata maintenance", None)


@pytest.mark.parametrize(
    ("version", "table_type"),
    [(v, t) for v in (9, 8, 6) for t in ("MERGE_ON_READ", "COPY_ON_WRITE")],
)
def test_services_beside_a_writer_on_a_generated_table(
    version: int, table_type: str, tmp_path: Path, spark_executor: Any
) -> None:
    storage = Storage()
    path = str(tmp_path / "t")
    create_trip_table(path, version, TableType(table_type), storage=storage)
    stats = ("partition_stats",) if version >= 8 else ()  # no partition stats in version 6
    initialize_metadata_table(
        HudiTable.open(storage, path), ("files", "column_stats", *stats, "bloom_filters", "record_index")
    )
    client = WriteClient(storage, path, options=WriteOptions(max_file_records=50))
    policy = ClusteringPolicy.from_mapping(
        {
            "tableservice.clustering.enabled": "true",
            "hoodie.clustering.plan.strategy.small.file.limit": str(1 << 30),
            "hoodie.clustering.plan.strategy.target.file.max.bytes": str(1 << 31),
        }
    )
    cleaner = CleanPlanner(CleanPolicy.from_mapping({"hoodie.cleaner.commits.retained": "2"}))
    maintenance = MetadataPolicy(compact_max_delta_commits=3, cleaner_commits_retained=2)
    ran: list[str] = []
    model = TableModel("uuid", "city", "ts", event_time=True)
    for i, step in enumerate(Workload(300, 8, 0.3, 0.05, partitions=2, seed=3).steps()):
        client.apply(step)
        model.upsert(step.records)
        if step.deletes is not None:
            model.delete(step.deletes)
        if i % 3 == 1 and table_type == "MERGE_ON_READ":
            compaction = schedule_compaction(_ctx(path, spark_executor), CompactionPolicy(), force=True)
            if compaction is not None:
                execute_compaction(_ctx(path, spark_executor), compaction.requested_time)
                ran.append("compaction")
        if i % 3 == 2:
            clustering = schedule_clustering(_ctx(path, spark_executor), policy, force=True)
            if clustering is not None:
                execute_clustering(_ctx(path, spark_executor), clustering.requested_time, policy)
                ran.append("clustering")
        table = HudiTable.open(storage, path)
        clean = schedule_clean(table, cleaner, force=True)
        if clean is not None:
            execute_clean(table, clean)
            ran.append("clean")
        done = maintain_metadata_table(HudiTable.open(storage, path), maintenance)
        if done.compaction is not None:
            ran.append("metadata compaction")
        table = HudiTable.open(storage, path)
        assert [str(d) for d in verify_metadata_table(table)] == [], f"step {i}: {ran}"
    rows = hudi_read(path)
    assert_same_rows(rows, hudi_read(str(listing_view(path, tmp_path / "view"))))
    assert table_rows(rows, TRIP_SCHEMA.names, "uuid", "city") == model.snapshot(TRIP_SCHEMA.names)
    assert {"clustering", "clean", "metadata compaction"} <= set(ran), ran
