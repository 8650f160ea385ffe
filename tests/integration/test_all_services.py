"""The daemon serving every table service beside a writer: compaction, clustering, clean and archival on one
merge-on-read table while commits keep arriving. At the end hudi-rs reads exactly the model of all writes, the
active timeline is bounded, archived instants are listed from the archive, and reads as of retained instants
still work."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tableservice.config import load_config
from tableservice.errors import ConflictError
from tableservice.hudi.metadata.initialize import initialize_metadata_table
from tableservice.hudi.metadata.verify import verify_metadata_table
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import TRIP_SCHEMA, Workload
from tableservice.locks import InProcessLockProvider
from tableservice.service.daemon import Daemon
from tableservice.storage import Storage
from tests.support.oracle import assert_same_rows, hudi_read, listing_view
from tests.support.table_model import TableModel, table_rows
from tests.support.trip_tables import create_trip_table

pytestmark = [pytest.mark.spark, pytest.mark.oracle]


@pytest.mark.parametrize(("version", "metadata"), [(6, False), (6, True), (9, False), (9, True)])
def test_every_service_beside_a_writer(version: int, metadata: bool, tmp_path: Path, spark_executor: Any) -> None:
    path = str(tmp_path / "t")
    create_trip_table(path, version, TableType.MERGE_ON_READ)
    if metadata:  # every partition, kept in step by the writer and by each action of the daemon
        stats = ("partition_stats",) if version >= 8 else ()  # no partition stats in version 6
        initialize_metadata_table(
            HudiTable.open(Storage(), path), ("files", "column_stats", *stats, "bloom_filters", "record_index")
        )
    steps = list(Workload(1200, 13, 0.1, 0.01, partitions=2, seed=5).steps())
    model = TableModel("uuid", "city", "ts", event_time=True)
    lock = InProcessLockProvider().table_lock("t", path)
    client = WriteClient(Storage(), path, lock=lambda: lock.hold(30.0), options=WriteOptions(max_file_records=150))
    columns = TRIP_SCHEMA.names
    first = client.apply(steps[0]).instant_time
    model.upsert(steps[0].records)
    snapshots = {first: model.snapshot(columns)}  # the model after each write, by its instant
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"""service:
  poll_interval_seconds: 0.3
  http: {{host: 127.0.0.1, port: 0}}
spark:
  master: "local[2]"
defaults:
  compaction:
    hoodie.compact.inline.max.delta.commits: 3
  clustering:
    schedule: true
    hoodie.clustering.async.max.commits: 6
    hoodie.clustering.plan.strategy.sort.columns: fare
    hoodie.clustering.plan.strategy.target.file.max.bytes: 1048576
  clean:
    hoodie.cleaner.commits.retained: 3
  archival:
    hoodie.keep.min.commits: 6
    hoodie.keep.max.commits: 8
  metadata:
    verify_after_action: true
    hoodie.metadata.compact.max.delta.commits: 4
    hoodie.metadata.cleaner.commits.retained: 3
tables:
  - uri: {path}
""")
    daemon = Daemon(str(cfg), load_config(str(cfg)), executor=spark_executor)
    errors: list[BaseException] = []
    writes: list[str] = []

    def writer() -> None:
        try:
            for step in steps[1:]:
                for _ in range(120):
                    try:
                        writes.append(client.apply(step).instant_time)
                        break
                    except ConflictError:
                        time.sleep(0.5)  # file groups under pending clustering: retry once it completes
                else:
                    raise AssertionError("a write kept conflicting with clustering")
                model.upsert(step.records)
                if step.deletes is not None:
                    model.delete(step.deletes)
                snapshots[writes[-1]] = model.snapshot(columns)
                time.sleep(0.5)
        except BaseException as e:  # reported below
            errors.append(e)

    async def scenario() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and not any(t.worker.status.last_poll for t in daemon.tables.values()):
                await anyio.sleep(0.2)
            thread = threading.Thread(target=writer)
            thread.start()
            await anyio.to_thread.run_sync(thread.join)
            finished = time.time()
            while time.monotonic() < deadline:
                polled = all((t.worker.status.last_poll or 0) > finished + 2 for t in daemon.tables.values())
                table = HudiTable.open(Storage(), path)
                settled = not table.timeline().pending() and not len(daemon.running)
                archived_any = bool(table.archived_instants()) or time.time() > finished + 30
                if polled and settled and archived_any:
                    break
                await anyio.sleep(0.5)
            daemon.request_stop()

    anyio.run(scenario)
    assert not errors, errors
    table = HudiTable.open(Storage(), path)
    timeline = table.timeline()
    actions = {i.action for i in timeline.completed()}
    archived = table.archived_instants(completed_only=True)
    done = actions | {Action(a.action) if a.action in Action._value2member_map_ else Action.COMMIT for a in archived}
    assert Action.COMPACTION in done or any(a.action == "commit" for a in archived)
    assert Action.CLEAN in done
    completed = {
        line.split("{")[1].split(",")[0]: float(line.rsplit(" ", 1)[1])
        for line in daemon.metrics.render()[0].decode().splitlines()
        if line.startswith("tableservice_actions_completed_total{")
    }
    for action in ("compaction", "clustering", "clean", "archival", *(("metadata",) if metadata else ())):
        assert completed.get(f'action="{action}"', 0) >= 1, f"the daemon completed no {action}: {completed}"
    if metadata:
        assert [str(d) for d in verify_metadata_table(table, timeline)] == []
        assert_same_rows(hudi_read(path), hudi_read(str(listing_view(path, tmp_path / "view"))))
        assert completed.get('action="metadata_verify"', 0) >= 4  # after each of the daemon's actions
    replaces = [i for i in timeline.completed() if i.action in (Action.CLUSTERING, Action.REPLACE_COMMIT)]
    assert all(table.is_clustering(i) for i in replaces)  # the writer never overwrites: replaces are clusterings
    from tableservice.planning.archival import ArchivalPolicy, plan_archival

    plan = plan_archival(
        table,
        timeline,
        ArchivalPolicy.from_mapping(
            {
                "hoodie.keep.min.commits": 6,
                "hoodie.keep.max.commits": 8,
                "hoodie.cleaner.commits.retained": 3,
                "hoodie.compact.inline.max.delta.commits": 3,
            }
        ),
    )
    assert archived, f"archival moved instants out of the active timeline: {plan}, {[str(i) for i in timeline]}"
    assert len(timeline.completed_writes()) <= 8 + 3
    assert table_rows(hudi_read(path), columns, "uuid", "city") == model.snapshot(columns)
    retained = [i.requested_time for i in timeline.completed_writes()]
    latest = retained[-1]
    assert_same_rows(hudi_read(path, as_of=latest), hudi_read(path), "as of the latest instant")
    assert len(writes) == len(steps) - 1
    committed = {i.requested_time for i in timeline.completed()} | {a.requested_time for a in archived}
    assert set(writes) <= committed, "every write the writer saw succeed is on the timeline"
    # Reads as of an older retained instant (the cleaner keeps 3 commits) return the model as of the last write
    # at or before it (compaction and clustering leave the rows as they were).
    older = retained[-3]
    as_of_write = max(t for t in snapshots if t <= older)
    assert table_rows(hudi_read(path, as_of=older), columns, "uuid", "city") == snapshots[as_of_write]
