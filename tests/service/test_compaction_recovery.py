"""Compaction under failure and concurrency: kill -9 mid-job, SIGTERM during an action, a writer appending
delta commits while a compaction runs, orphaned tasks of an earlier attempt, and Spark Connect."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tableservice.errors import ConflictError, StaleAttemptError
from tableservice.hudi.action.compact import run_compaction_task, start_attempt
from tableservice.hudi.action.tasks import compaction_tasks
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action, State
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import TRIP_SCHEMA, Workload
from tableservice.locks import InProcessLockProvider
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.actions import TableContext
from tableservice.service.compaction import execute_compaction, schedule_compaction
from tableservice.storage import Storage
from tests.support.daemon_helpers import config_text, mor_table
from tests.support.oracle import assert_same_rows, hudi_read
from tests.support.servers import run_watching_children
from tests.support.table_model import TableModel, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.oracle]
FILE_NAME = "_hoodie_file_name"


def _ctx(path: str, executor: Any) -> TableContext:
    table = HudiTable.open(Storage(), path)
    return TableContext(table=table, lock=InProcessLockProvider().table_lock(table.name, path), executor=executor)


def _data_files(path: str) -> set[str]:
    return {p.name for p in Path(path).rglob("*.parquet") if ".hoodie" not in p.parts}


def _env() -> dict[str, str]:
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_kill_9_mid_compaction_then_next_pass_completes(tmp_path: Path, spark_executor: Any) -> None:
    path = mor_table(tmp_path / "t", records=120_000, commits=3, max_file_records=15_000)
    before = hudi_read(path)
    files_before = _data_files(path)
    instant = schedule_compaction(_ctx(path, spark_executor), CompactionPolicy(), force=True)
    assert instant is not None
    t = instant.requested_time
    proc = subprocess.Popen(
        [sys.executable, "-m", "tableservice", "compact", "run", path, "--instant", t, "--master", "local[2]"],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # Kill the whole process (driver, JVM, Python workers) once it has written some new base files.
        _wait_for(
            lambda: any(name.endswith(f"_{t}.parquet") for name in _data_files(path)),
            300,
            "the first compacted base file",
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    table = HudiTable.open(Storage(), path)
    assert table.timeline().get(t) == instant.with_state(State.INFLIGHT)
    dead_files = {n for n in _data_files(path) if n.endswith(f"_{t}.parquet")}
    assert dead_files
    assert_same_rows(hudi_read(path), before, "readers ignore the dead attempt")
    # The next pass rolls back the dead attempt and runs the plan again under the same instant.
    result = execute_compaction(_ctx(path, spark_executor), t)
    table = HudiTable.open(Storage(), path)
    done = table.timeline().get(t)
    assert done is not None and done.is_completed
    assert [i.action for i in table.timeline().completed() if i.action is Action.ROLLBACK] == [Action.ROLLBACK]
    new_files = {Path(s.path or "").name for s in result.stats}
    slice_files = {s.base_file.file_name for s in table.file_system_view().latest_slices() if s.base_file}
    assert not (dead_files - new_files) & (_data_files(path) | slice_files), "a file of the dead attempt survived"
    assert _data_files(path) == (files_before | new_files)
    assert_same_rows(hudi_read(path).drop_columns([FILE_NAME]), before.drop_columns([FILE_NAME]), "after recovery")


def test_sigterm_during_action_leaves_a_state_the_next_start_completes(tmp_path: Path, spark_executor: Any) -> None:
    path = mor_table(tmp_path / "t", records=120_000, commits=3, max_file_records=15_000)
    before = hudi_read(path)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(config_text([path], grace=0, max_delta_commits=1))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tableservice", "run", "--config", str(cfg)],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:

        def inflight() -> bool:
            return any(
                i.action is Action.COMPACTION and i.is_inflight for i in HudiTable.open(Storage(), path).timeline()
            )

        _wait_for(inflight, 300, "an inflight compaction")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    timeline = HudiTable.open(Storage(), path).timeline()
    compactions = [i for i in timeline if i.action is Action.COMPACTION]
    assert len(compactions) == 1
    assert_same_rows(hudi_read(path).drop_columns([FILE_NAME]), before.drop_columns([FILE_NAME]), "after SIGTERM")
    if not compactions[0].is_completed:
        execute_compaction(_ctx(path, spark_executor), compactions[0].requested_time)
    table = HudiTable.open(Storage(), path)
    assert all(i.is_completed for i in table.timeline() if i.action is Action.COMPACTION)
    assert_same_rows(hudi_read(path).drop_columns([FILE_NAME]), before.drop_columns([FILE_NAME]), "completed")


@pytest.mark.parametrize("version", [6, 9])
def test_writer_appends_while_compaction_runs(version: int, tmp_path: Path, spark_executor: Any) -> None:
    storage = Storage()
    path = mor_table(tmp_path / "t", version=version, records=3000, commits=3, max_file_records=500)
    lock_provider = InProcessLockProvider()
    ctx = TableContext(
        table=HudiTable.open(storage, path), lock=lock_provider.table_lock("t", path), executor=spark_executor
    )
    # The model of everything written so far (same seed and steps as mor_table's workload).
    model = TableModel("uuid", "city", "ts", event_time=True)
    for step in Workload(3000, 3, 0.3, 0.03, partitions=2, seed=7).steps():
        model.upsert(step.records)
        if step.deletes is not None:
            model.delete(step.deletes)
    instant = schedule_compaction(ctx, CompactionPolicy(), force=True)
    assert instant is not None
    errors: list[BaseException] = []

    def compact() -> None:
        try:
            execute_compaction(ctx, instant.requested_time)
        except BaseException as e:  # reported below
            errors.append(e)

    worker = threading.Thread(target=compact)
    worker.start()
    client = WriteClient(storage, path, lock=ctx.locked, options=WriteOptions(max_file_records=500))
    more = list(Workload(3000, 4, 0.2, 0.02, partitions=2, seed=7).steps())[1:]
    for step in more:
        # Same keys as the table's records: updates (some with older event times) and deletes of live records.
        client.apply(step)
        model.upsert(step.records)
        if step.deletes is not None:
            model.delete(step.deletes)
    worker.join()
    assert not errors, errors
    table = HudiTable.open(storage, path)
    assert table.timeline().get(instant.requested_time) is not None
    assert table.timeline().is_completed(instant.requested_time)
    columns = TRIP_SCHEMA.names
    assert table_rows(hudi_read(path), columns, "uuid", "city") == model.snapshot(columns)


def test_orphaned_task_of_a_superseded_attempt_leaves_no_file(tmp_path: Path, spark_executor: Any) -> None:
    path = mor_table(tmp_path / "t", records=400, commits=3)
    ctx = _ctx(path, spark_executor)
    instant = schedule_compaction(ctx, CompactionPolicy(), force=True)
    assert instant is not None
    from tableservice.planning.compaction.validate import validate_compaction_plan

    table = ctx.table
    plan = table.compaction_plan(instant)
    ops = validate_compaction_plan(table, instant, plan, plan_file="plan")
    tasks = compaction_tasks(table, table.timeline(), instant.requested_time, ops)
    old = start_attempt(table.storage, path, instant.requested_time)
    start_attempt(table.storage, path, instant.requested_time)  # a newer attempt took over
    before = _data_files(path)
    from dataclasses import replace

    with pytest.raises(StaleAttemptError):
        run_compaction_task(table.storage, replace(tasks[0], attempt_id=old))
    assert _data_files(path) == before
    assert issubclass(StaleAttemptError, ConflictError)


def test_compaction_through_spark_connect(tmp_path: Path, spark_connect_url: str, spark_executor: Any) -> None:
    """The same compaction job, submitted through a local Spark Connect server by `tableservice compact run
    --remote` (a separate process: one process holds either a classic or a remote session), which starts no
    process of its own: no local JVM."""
    path = mor_table(tmp_path / "t", records=600, commits=3)
    before = hudi_read(path)
    instant = schedule_compaction(_ctx(path, spark_executor), CompactionPolicy(), force=True)
    assert instant is not None
    code, out, err, started = run_watching_children(
        [sys.executable, "-m", "tableservice", "compact", "run", path, "--remote", spark_connect_url],
        env=_env(),
        timeout=600,
    )
    assert code == 0, err[-2000:]
    assert f"completed compaction {instant.requested_time}" in out
    assert started == set()  # the CLI is a Spark Connect client only: no local JVM (nor any other process)
    table = HudiTable.open(Storage(), path)
    assert table.timeline().is_completed(instant.requested_time)
    assert all(not s.log_files for s in table.file_system_view().latest_slices())
    assert_same_rows(hudi_read(path).drop_columns([FILE_NAME]), before.drop_columns([FILE_NAME]), "via Connect")


def test_compaction_leaves_out_file_groups_a_replace_took(tmp_path: Path, spark_executor: Any) -> None:
    """An insert overwrite that completes while a compaction is pending replaces some of the file groups the plan
    compacts: the compaction commits the others and leaves nothing in the replaced ones (a base file there would
    outlive the cleaning of the replaced group and bring the overwritten rows back once the replace is archived)."""
    from tableservice.hudi.file_group.filenames import parse_base_file_name
    from tableservice.hudi.write.client import WriteClient as Client

    path = mor_table(tmp_path / "t", records=400, commits=3)
    ctx = _ctx(path, spark_executor)
    instant = schedule_compaction(ctx, CompactionPolicy(), force=True)
    assert instant is not None
    planned = {
        (op.partition_path or "", op.file_id or "") for op in ctx.table.compaction_plan(instant).operations or ()
    }
    overwrite = next(iter(Workload(50, 1, partitions=1, seed=99).steps())).records  # one partition only
    written = Client(Storage(), path).insert_overwrite(overwrite)
    replaced = {(p, f) for p, fids in written.replaced.items() for f in fids}
    assert replaced & planned and planned - replaced, "the overwrite took some, not all, of the planned groups"
    after_overwrite = hudi_read(path)
    done = execute_compaction(_ctx(path, spark_executor), instant.requested_time)
    committed = {(s.partition_path or "", s.file_id or "") for s in done.stats}
    assert committed == planned - replaced
    leftovers = [
        p
        for p in Path(path).rglob("*.parquet")
        if (name := parse_base_file_name(p.name)) is not None
        and name.instant_time == instant.requested_time
        and (p.parent.relative_to(path).as_posix(), name.file_id) in replaced
    ]
    assert leftovers == []
    table = HudiTable.open(Storage(), path)
    assert table.timeline().is_completed(instant.requested_time)
    assert_same_rows(
        hudi_read(path).drop_columns([FILE_NAME]), after_overwrite.drop_columns([FILE_NAME]), "the overwrite stands"
    )


def test_lock_lost_before_commit_abandons_the_compaction(tmp_path: Path, spark_executor: Any) -> None:
    """A lock lost while held (ZooKeeper session loss, DynamoDB lease taken over) means whatever the holder was
    about to commit is abandoned, never written."""
    from tableservice.errors import LockLostError
    from tableservice.locks import LockHandle, TableLock

    class LosingLock(TableLock):
        key = "losing"

        def __init__(self) -> None:
            self.acquired = 0

        def acquire(self, timeout_s: float) -> LockHandle:
            self.acquired += 1
            handle = LockHandle(self.key, "test")
            handle.lost = self.acquired >= 2  # the commit section's lock is lost as soon as it is taken
            return handle

        def release(self, handle: LockHandle) -> None:
            return None

    path = mor_table(tmp_path / "t", records=300, commits=3)
    before = hudi_read(path)
    table = HudiTable.open(Storage(), path)
    ctx = TableContext(table=table, lock=LosingLock(), executor=spark_executor)
    instant = schedule_compaction(ctx, CompactionPolicy(), force=True)
    assert instant is not None
    with pytest.raises(LockLostError):
        execute_compaction(ctx, instant.requested_time)
    table = HudiTable.open(Storage(), path)
    assert not table.timeline().is_completed(instant.requested_time)
    assert_same_rows(hudi_read(path), before, "nothing committed")
