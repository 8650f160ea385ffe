"""Building tables and configuration files for daemon tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Instant
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.locks import InProcessLockProvider
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.actions import TableContext
from tableservice.service.compaction import schedule_compaction
from tableservice.storage import Storage
from tests.support.trip_tables import create_trip_table


def mor_table(
    path: Path,
    *,
    version: int = 9,
    records: int = 300,
    commits: int = 4,
    seed: int = 7,
    max_file_records: int = 60,
    name: str = "t",
) -> str:
    storage = Storage()
    create_trip_table(str(path), version, TableType.MERGE_ON_READ, name=name, storage=storage)
    client = WriteClient(storage, str(path), options=WriteOptions(max_file_records=max_file_records))
    for step in Workload(records, commits, 0.3, 0.03, partitions=2, seed=seed).steps():
        client.apply(step)
    return str(path)


def config_text(
    tables: list[str],
    *,
    max_delta_commits: int = 2,
    poll: float = 0.5,
    grace: float = 60,
    spark: str = 'master: "local[2]"',
    extra: str = "",
) -> str:
    entries = "\n".join(f"  - uri: {t}\n    name: table{i}" for i, t in enumerate(tables))
    return f"""\
service:
  poll_interval_seconds: {poll}
  shutdown_grace_seconds: {grace}
  retry: {{initial_backoff_seconds: 1, max_backoff_seconds: 5, quarantine_after_failures: 3, quarantine_seconds: 60}}
  http: {{host: 127.0.0.1, port: 0}}
  log: {{level: INFO}}
spark:
  {spark}
defaults:
  compaction:
    hoodie.compact.inline.max.delta.commits: {max_delta_commits}
tables:
{entries}
{extra}"""


def with_pending_compaction(path: Path, executor: object, **table: Any) -> tuple[str, TableContext, Instant]:
    """A merge-on-read table (`mor_table` arguments) with a compaction plan scheduled on it, and the context that
    scheduled it (in-process lock, `executor`)."""
    location = mor_table(path, **table)
    hudi_table = HudiTable.open(Storage(), location)
    ctx = TableContext(
        table=hudi_table,
        lock=InProcessLockProvider().table_lock(hudi_table.name, location),
        executor=executor,  # type: ignore[arg-type]
    )
    scheduled = schedule_compaction(ctx, CompactionPolicy(), force=True)
    assert scheduled is not None
    return location, ctx, scheduled


def run_until(daemon: Any, done: Any, timeout: float = 120) -> None:
    """Run `daemon` until `done()` holds (polled every 0.2 s) or `timeout` seconds pass, then stop it."""
    import time

    import anyio

    async def scenario() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and not done():
                await anyio.sleep(0.2)
            daemon.request_stop()

    anyio.run(scenario)
