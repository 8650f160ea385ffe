"""Clustering end to end on Spark: generated tables of versions 6, 8 and 9 (COW and MOR) and fixture tables.
hudi-rs reads the same rows afterwards, each new file is sorted by the sort columns, replaced groups are hidden,
time travel to earlier instants still returns the old rows; a crash mid-job is recovered."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.locks import InProcessLockProvider
from tableservice.planning.clustering.policy import ClusteringPolicy
from tableservice.service.actions import TableContext
from tableservice.service.clustering import execute_clustering, schedule_clustering
from tableservice.storage import Storage
from tests.support.fixtures import fixture_table
from tests.support.oracle import assert_same_rows, hudi_read
from tests.support.trip_tables import create_trip_table

pytestmark = [pytest.mark.spark, pytest.mark.oracle]
FILE_NAME = "_hoodie_file_name"


def _policy(sort: str | None = "fare", **extra: Any) -> ClusteringPolicy:
    values: dict[str, Any] = {
        "tableservice.clustering.enabled": "true",
        "hoodie.clustering.plan.strategy.target.file.max.bytes": str(1 << 20),
    }
    if sort:
        values["hoodie.clustering.plan.strategy.sort.columns"] = sort
    values.update(extra)
    return ClusteringPolicy.from_mapping(values)


def _ctx(path: str, executor: Any) -> TableContext:
    table = HudiTable.open(Storage(), path)
    return TableContext(table=table, lock=InProcessLockProvider().table_lock(table.name, path), executor=executor)


def _table(tmp_path: Path, version: int, table_type: TableType, block: str = "avro") -> str:
    storage = Storage()
    path = str(tmp_path / "t")
    create_trip_table(path, version, table_type, storage=storage)
    client = WriteClient(storage, path, options=WriteOptions(max_file_records=40, log_block_format=block))
    for step in Workload(400, 4, 0.2, 0.03, partitions=2).steps():
        client.apply(step)
    return path


def _cluster_and_check(path: str, executor: Any, policy: ClusteringPolicy, sort: str | None) -> None:
    ctx = _ctx(path, executor)
    before = hudi_read(path)
    earlier = [i.requested_time for i in ctx.table.timeline().completed_writes()]
    as_of = {t: hudi_read(path, as_of=t) for t in earlier[-2:]}
    instant = schedule_clustering(ctx, policy, force=True)
    assert instant is not None
    sizes = {
        (sl.partition_path, sl.file_id): sl.total_size for sl in ctx.table.file_system_view().latest_merged_slices()
    }
    version = ctx.table.config.version
    assert instant.action is (Action.REPLACE_COMMIT if version == 6 else Action.CLUSTERING)
    result = execute_clustering(_ctx(path, executor), instant.requested_time, policy)
    table = HudiTable.open(Storage(), path)
    done = table.timeline().get(instant.requested_time)
    assert done is not None and done.is_completed
    md = table.replace_commit_metadata(done)
    assert md.operation_type == "CLUSTER"
    replaced = {(p, f) for p, fids in md.replaced_file_ids().items() for f in fids}
    assert replaced == {(p, f) for p, fids in result.replaced.items() for f in fids}
    assert result.bytes_read == sum(sizes[g] for g in replaced)  # what the read_bytes metric counts
    visible = {g.id for g in table.file_system_view().file_groups()}
    assert replaced and result.stats, "the clustering replaced file groups and wrote new ones"
    assert not (visible & replaced), "replaced file groups must be hidden"
    assert {(s.partition_path or "", s.file_id or "") for s in result.stats} <= visible
    for s in result.stats:
        rows = pq.read_table(str(Path(path) / (s.path or "")))
        assert set(rows.column(FILE_NAME).to_pylist()) == {Path(s.path or "").name}
        if sort:
            values = rows.column(sort).to_pylist()
            assert values == sorted(values)
        assert (Path(path) / (s.path or "")).stat().st_size < 4 * (1 << 20)
    after = hudi_read(path)
    assert_same_rows(after.drop_columns([FILE_NAME]), before.drop_columns([FILE_NAME]), "after clustering")
    for t, rows in as_of.items():
        assert_same_rows(hudi_read(path, as_of=t), rows, f"time travel to {t}")


@pytest.mark.parametrize(
    ("version", "table_type", "block"),
    [
        (6, TableType.COPY_ON_WRITE, "avro"),
        (8, TableType.MERGE_ON_READ, "parquet"),
        (9, TableType.MERGE_ON_READ, "avro"),
        (9, TableType.COPY_ON_WRITE, "avro"),
    ],
)
def test_clustering_of_generated_tables(
    version: int, table_type: TableType, block: str, tmp_path: Path, spark_executor: Any
) -> None:
    path = _table(tmp_path, version, table_type, block)
    _cluster_and_check(path, spark_executor, _policy(), "fare")


def test_z_order_clustering(tmp_path: Path, spark_executor: Any) -> None:
    path = _table(tmp_path, 9, TableType.COPY_ON_WRITE)
    policy = _policy("fare,passengers", **{"hoodie.layout.optimize.strategy": "z-order"})
    _cluster_and_check(path, spark_executor, policy, None)


@pytest.mark.parametrize(
    "name",
    [
        "sample_table/cow/v6_nonpartitioned",
        "sample_table/cow/v8_nonpartitioned",
        "sample_table/cow/v9_txns_complex_nometa",
    ],
)
def test_clustering_of_fixture_tables(name: str, tmp_path: Path, spark_executor: Any) -> None:
    path = str(fixture_table(name, tmp_path))
    _cluster_and_check(path, spark_executor, _policy(None), None)


def test_writes_to_groups_under_pending_clustering_are_rejected(tmp_path: Path, spark_executor: Any) -> None:
    from tableservice.errors import ConflictError

    path = _table(tmp_path, 9, TableType.MERGE_ON_READ)
    ctx = _ctx(path, spark_executor)
    assert schedule_clustering(ctx, _policy(), force=True) is not None
    step = list(Workload(400, 5, 0.2, 0.03, partitions=2).steps())[4]
    with pytest.raises(ConflictError, match="pending clustering"):
        WriteClient(Storage(), path).apply(step)


def test_kill_9_mid_clustering_then_next_pass_completes(tmp_path: Path, spark_executor: Any) -> None:
    storage = Storage()
    path = str(tmp_path / "big")
    create_trip_table(path, 9, TableType.COPY_ON_WRITE, name="big", storage=storage)
    client = WriteClient(storage, path, options=WriteOptions(max_file_records=2500))
    client.insert(next(iter(Workload(150_000, 1, partitions=4, seed=3).steps())).records)
    before = hudi_read(path)
    policy = _policy(**{"hoodie.clustering.plan.strategy.max.bytes.per.group": str(2 << 20)})
    instant = schedule_clustering(_ctx(path, spark_executor), policy, force=True)
    assert instant is not None
    t = instant.requested_time
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"""spark:
  master: "local[2]"
tables:
  - uri: {path}
    policy:
      compaction: {{enabled: false}}
      clustering:
        hoodie.clustering.plan.strategy.sort.columns: fare
        hoodie.clustering.plan.strategy.target.file.max.bytes: {1 << 20}
""")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tableservice", "once", "--config", str(cfg)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not list(Path(path).rglob(f"*_{t}.parquet")):
            time.sleep(0.05)
        assert list(Path(path).rglob(f"*_{t}.parquet")), "the killed run never wrote a clustered file"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert_same_rows(hudi_read(path), before, "readers ignore the dead attempt")
    result = execute_clustering(_ctx(path, spark_executor), t, policy)
    table = HudiTable.open(Storage(), path)
    assert table.timeline().is_completed(t)
    kept = {Path(s.path or "").name for s in result.stats}
    assert {p.name for p in Path(path).rglob(f"*_{t}.parquet")} == kept, "a file of the dead attempt survived"
    assert_same_rows(hudi_read(path).drop_columns([FILE_NAME]), before.drop_columns([FILE_NAME]), "recovered")
