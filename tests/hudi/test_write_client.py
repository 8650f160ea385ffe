"""What the write client leaves on disk: instants, markers, heartbeats, commit metadata; and what a failed write
leaves (invisible to readers)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tableservice.errors import ConflictError
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import read
from tableservice.hudi.timeline.instant import Action, State
from tableservice.hudi.write import handles
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.markers import heartbeat_expired, heartbeat_path, list_marked_files, marker_folder
from tableservice.hudi.write.workload import TRIP_SCHEMA, Workload
from tableservice.storage import Storage
from tests.support.oracle import assert_same_rows, hudi_read
from tests.support.table_model import table_rows
from tests.support.trip_tables import create_trip_table


def _table(tmp_path: Path, version: int, table_type: TableType) -> tuple[Storage, str, list[pa.Table]]:
    storage = Storage()
    path = str(tmp_path / "t")
    create_trip_table(path, version, table_type, storage=storage)
    steps = [s.records for s in Workload(120, 3, 0.5, 0.0, partitions=2).steps()]
    return storage, path, steps


@pytest.mark.parametrize("version", [6, 9])
@pytest.mark.parametrize("table_type", [TableType.MERGE_ON_READ, TableType.COPY_ON_WRITE])
def test_completed_write_cleans_up_and_records_stats(tmp_path: Path, version: int, table_type: TableType) -> None:
    storage, path, steps = _table(tmp_path, version, table_type)
    client = WriteClient(storage, path)
    first = client.insert(steps[0])
    second = client.upsert(steps[1])
    table = HudiTable.open(storage, path)
    for result in (first, second):
        assert not Path(marker_folder(path, result.instant_time)).exists()
        assert not Path(heartbeat_path(path, result.instant_time)).exists()
    instant = table.timeline().get(second.instant_time)
    assert instant is not None and instant.is_completed
    assert instant.action is (Action.DELTA_COMMIT if table_type is TableType.MERGE_ON_READ else Action.COMMIT)
    md = table.commit_metadata(instant)
    assert md.operation_type == "UPSERT"
    stats = md.write_stats()
    assert sum(s.num_update_writes or 0 for s in stats) == steps[1].num_rows
    for s in stats:
        assert s.path is not None and (Path(path) / s.path).is_file()
        assert s.file_size_in_bytes == (Path(path) / s.path).stat().st_size
        assert s.prev_commit == first.instant_time
    assert md.table_schema is not None and '"uuid"' in md.table_schema


@pytest.mark.oracle
@pytest.mark.parametrize("version", [6, 8])
def test_failed_write_leaves_an_invisible_inflight_instant(
    tmp_path: Path, version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage, path, steps = _table(tmp_path, version, TableType.MERGE_ON_READ)
    client = WriteClient(storage, path, options=WriteOptions(max_file_records=20))
    client.insert(steps[0])
    before = read(HudiTable.open(storage, path))

    calls = {"n": 0}
    real = handles.write_log_file

    def failing(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full (injected)")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(handles, "write_log_file", failing)
    with pytest.raises(OSError, match="injected"):
        client.upsert(steps[1])
    table = HudiTable.open(storage, path)
    pending = table.timeline().pending().instants
    assert len(pending) == 1 and pending[0].state is State.INFLIGHT
    marked = list_marked_files(storage, path, pending[0].requested_time)
    assert len(marked) == 1  # the log file written before the failure
    partition, name, _ = marked[0]
    assert (Path(path) / partition / name).is_file()
    assert_same_rows(read(table), before, "ours after failed write")
    assert_same_rows(hudi_read(path), before, "hudi-rs after failed write")
    # The failed writer's heartbeat is gone or stale: it counts as expired once its interval has passed.
    assert heartbeat_expired(storage, path, pending[0].requested_time, interval_ms=0, tolerable_misses=0)


def test_updates_to_file_groups_under_pending_clustering_are_rejected(tmp_path: Path) -> None:
    from tableservice.hudi.models import (
        HoodieClusteringGroup,
        HoodieClusteringPlan,
        HoodieRequestedReplaceMetadata,
        HoodieSliceInfo,
        encode_requested_replace_metadata,
    )

    storage, path, steps = _table(tmp_path, 9, TableType.COPY_ON_WRITE)
    client = WriteClient(storage, path)
    client.insert(steps[0])
    table = HudiTable.open(storage, path)
    slice_ = table.file_system_view().latest_slices()[0]
    plan = HoodieRequestedReplaceMetadata(
        operation_type="CLUSTER",
        clustering_plan=HoodieClusteringPlan(
            input_groups=(
                HoodieClusteringGroup(
                    slices=(
                        HoodieSliceInfo(
                            data_file_path=slice_.base_file.location if slice_.base_file else "",
                            delta_file_paths=(),
                            file_id=slice_.file_id,
                            partition_path=slice_.partition_path,
                            bootstrap_file_path="",
                            version=1,
                        ),
                    ),
                    num_output_file_groups=1,
                    metrics={},
                    version=1,
                ),
            ),
            version=1,
            preserve_hoodie_metadata=True,
        ),
        extra_metadata={},
        version=1,
    )
    t = table.active.new_instant_time(table.timeline())
    table.active.create_requested(t, Action.CLUSTERING, encode_requested_replace_metadata(plan, table_version=9))
    with pytest.raises(ConflictError, match="pending clustering"):
        client.upsert(steps[1])
    # Refused before writing anything: the attempt leaves no pending instant behind.
    after = HudiTable.open(storage, path).timeline().pending().instants
    assert [i.action for i in after] == [Action.CLUSTERING]


@pytest.mark.parametrize("version", [6, 9])
@pytest.mark.parametrize("table_type", [TableType.MERGE_ON_READ, TableType.COPY_ON_WRITE])
def test_a_write_that_lost_the_race_to_an_overlapping_write_fails_and_undoes_itself(
    tmp_path: Path, version: int, table_type: TableType
) -> None:
    """Writer B starts, writer A starts, B commits updates to the same file groups, then A commits: A fails and
    leaves no trace. B started first, so in table version 6 only file times tell that B completed after A
    started."""
    import contextlib
    import threading
    from collections.abc import Callable, Iterator

    storage, path, steps = _table(tmp_path, version, table_type)
    WriteClient(storage, path).insert(steps[0])
    b_started, a_started, b_committed = threading.Event(), threading.Event(), threading.Event()

    def sequenced(
        started: threading.Event, before_commit: threading.Event, committed: threading.Event | None
    ) -> Callable[[], contextlib.AbstractContextManager[None]]:
        calls = {"n": 0}

        @contextlib.contextmanager
        def lock() -> Iterator[None]:
            calls["n"] += 1
            if calls["n"] == 2:
                assert before_commit.wait(30)
            yield
            if calls["n"] == 1:
                started.set()  # the requested instant exists
            elif calls["n"] == 2 and committed is not None:
                committed.set()

        return lock

    b = threading.Thread(
        target=WriteClient(
            storage,
            path,
            lock=sequenced(b_started, a_started, b_committed),
            options=WriteOptions(stage_id=2),  # two jobs: their files' write tokens differ, as in Spark
        ).upsert,
        args=(steps[2],),
    )
    b.start()
    assert b_started.wait(30)
    with pytest.raises(ConflictError, match="concurrently"):
        WriteClient(storage, path, lock=sequenced(a_started, b_committed, None)).upsert(steps[1])
    b.join(30)
    timeline = HudiTable.open(storage, path).timeline()
    writes = timeline.completed_writes().instants
    assert timeline.pending().instants == () and len(writes) == 2
    assert [i.action for i in timeline.completed()][-1] is Action.ROLLBACK
    _, ref, ref_steps = _table(tmp_path / "ref", version, table_type)  # the same steps without writer A
    WriteClient(storage, ref).insert(ref_steps[0])
    WriteClient(storage, ref).upsert(ref_steps[2])
    columns = TRIP_SCHEMA.names
    assert table_rows(hudi_read(path), columns, "uuid", "city") == table_rows(hudi_read(ref), columns, "uuid", "city")
