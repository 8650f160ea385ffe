"""Tables with long histories, built quickly: a merge-on-read trip table whose timeline holds `instants` completed
instants, most of them archived by our own archival (v6 archive log files, v8/v9 LSM history).

The history is empty delta commits (no write stats) with an empty compaction every `compaction_every` instants,
written straight to the timeline folder as the write client would leave them (requested, inflight, completed),
in chunks, each chunk followed by an archival run with Hudi's default bounds (keep 20 to 30 commits); then two
real delta commits with rows, so the active timeline ends in data. Used by `bench.timeline` and the tests of the
poll's cost on long timelines."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tableservice.hudi.action.archival import archive
from tableservice.hudi.models import (
    HoodieCommitMetadata,
    HoodieCompactionPlan,
    encode_commit_metadata,
    encode_compaction_plan,
)
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action, Instant, State, format_instant_time
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.planning.archival import ArchivalPolicy
from tableservice.storage import Storage
from tests.support.trip_tables import create_trip_table

HISTORY_START = datetime(2020, 1, 1, tzinfo=UTC)


def _empty_commit(version: int, *, compacted: bool, schema: str) -> bytes:
    md = HoodieCommitMetadata(
        partition_to_write_stats={},
        compacted=compacted,
        extra_metadata={"schema": schema},
        operation_type="compact" if compacted else "upsert",
    )
    return encode_commit_metadata(md, table_version=version)


def write_history(table: HudiTable, count: int, *, first: int = 0, compaction_every: int = 100) -> None:
    """On local disk: `count` completed instants numbered from `first` (one second apart from HISTORY_START):
    delta commits, and a compaction (empty plan, `commit`) in the middle of every `compaction_every` instants (so
    that the newest compaction is archived too)."""
    config = table.config
    version, layout = config.version, config.layout_version
    schema = table.latest_schema()
    schema_text = "" if schema is None else json.dumps(schema)
    plan = encode_compaction_plan(HoodieCompactionPlan(operations=()), table_version=version)
    delta_inflight = _empty_commit(version, compacted=False, schema="")
    delta_done = _empty_commit(version, compacted=False, schema=schema_text)
    compaction_done = _empty_commit(version, compacted=True, schema=schema_text)
    active = table.active
    for n in range(first, first + count):
        moment = HISTORY_START + timedelta(seconds=n)
        t = format_instant_time(moment, UTC)
        done = format_instant_time(moment + timedelta(milliseconds=500), UTC) if layout >= 2 else None
        if n % compaction_every == compaction_every // 2:
            requested = Instant(t, Action.COMPACTION, State.REQUESTED)
            files = [(requested, plan), (requested.with_state(State.INFLIGHT), b"")]
            files.append((requested.with_state(State.COMPLETED, done), compaction_done))
        else:
            requested = Instant(t, Action.DELTA_COMMIT, State.REQUESTED)
            files = [(requested, b""), (requested.with_state(State.INFLIGHT), delta_inflight)]
            files.append((requested.with_state(State.COMPLETED, done), delta_done))
        for instant, content in files:  # local disk, without the storage layer's fsync: a bench fixture
            Path(active.path_of(instant)).write_bytes(content)


def long_timeline_table(
    path: str, version: int, instants: int, *, chunk: int = 1000, compaction_every: int = 100
) -> str:
    """A merge-on-read table at `path` with `instants` completed instants of history (archived down to Hudi's
    default 20..30 kept commits after each chunk) and two delta commits with rows after them."""
    storage = Storage()
    create_trip_table(path, version, TableType.MERGE_ON_READ, name="long", storage=storage)
    table = HudiTable.open(storage, path)
    policy = ArchivalPolicy()
    written = 0
    while written < instants:
        n = min(chunk, instants - written)
        write_history(table, n, first=written, compaction_every=compaction_every)
        written += n
        archive(table, policy)
    client = WriteClient(storage, path, options=WriteOptions(max_file_records=50))
    for step in Workload(40, 2, 0.3, 0.0, partitions=2, seed=5).steps():
        client.apply(step)
    return path
