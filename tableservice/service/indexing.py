"""The `indexing` service: executes pending indexing plans (a Hudi writer's, an operator's or the daemon's) and
schedules one when the table's `indexing` policy names metadata-table indexes the table lacks.

Building runs beside writers (`tableservice.hudi.action.indexing`): the table lock is taken to schedule and to
publish, not while records are built. Record and secondary indexes read every record key of the table; their keys
are read on Spark, one task per file slice (`executors.indexing`), and the metadata records are made on the
driver from what the tasks return.
"""

from __future__ import annotations

import logging

from tableservice.executors.indexing import spark_partition_writer
from tableservice.hudi.action.indexing import (
    IndexingResult,
    execute_indexing,
    planned_partitions,
    schedule_indexing,
)
from tableservice.hudi.metadata.column_stats import default_columns
from tableservice.hudi.metadata.keys import SECONDARY_INDEX_PREFIX
from tableservice.hudi.table.hudi_table import HudiTable, TableSnapshot
from tableservice.hudi.table.read import read_schema
from tableservice.hudi.timeline.instant import Action, Instant
from tableservice.locks import LockHandle
from tableservice.planning.due import Due
from tableservice.planning.indexing.policy import COLUMN_STATS, IndexingPolicy, missing
from tableservice.service.actions import TableContext
from tableservice.service.protocol import Outcome, ServiceBase, ServiceSettings

log = logging.getLogger(__name__)


class IndexingService(ServiceBase[IndexingPolicy]):
    name = "indexing"
    uses_spark = True

    def __init__(self, settings: ServiceSettings[IndexingPolicy], secondary_indexes: dict[str, str] | None = None):
        super().__init__(settings)
        self.secondary_indexes = dict(secondary_indexes or {})

    def pending(self, snapshot: TableSnapshot) -> list[Instant]:
        return list(snapshot.timeline.pending_of(Action.INDEXING))

    def due(self, snapshot: TableSnapshot, *, listing: bool = True) -> Due:
        todo = self._missing(snapshot.table, snapshot)
        if todo:
            return Due(True, f"due: indexes the policy wants are missing: {', '.join(todo)}")
        return Due(False, "not due: every index the policy wants is built or planned")

    def _missing(self, table: HudiTable, snapshot: TableSnapshot) -> list[str]:
        config = snapshot.config
        wanted = self.settings.policy.wanted(config.version, self.secondary_indexes)
        if not wanted:
            return []
        present = {*config.metadata_partitions, *config.metadata_partitions_inflight}
        if set(wanted) <= present:
            return []
        present |= set(planned_partitions(table, snapshot.timeline))
        return missing(wanted, present)

    def schedule(self, ctx: TableContext) -> Instant | None:
        table = ctx.table
        todo = self._missing(table, table.snapshot())
        if not todo:
            return None
        return schedule_indexing(
            table,
            todo,
            lock=ctx.lock_factory(),
            definitions=index_definitions(table, todo, self.settings.policy, self.secondary_indexes),
        )

    def execute(self, ctx: TableContext, instant: Instant, lease: LockHandle) -> Outcome:
        result = run_indexing(ctx, instant, lease)
        return Outcome(self.name, result.instant, result, records_written=result.records)


def index_definitions(
    table: HudiTable, partitions: list[str], policy: IndexingPolicy, secondary: dict[str, str]
) -> dict[str, dict[str, object]]:
    """The definitions `.hoodie/.index_defs/index.json` records for new indexes (table version 8+): secondary
    indexes, and column stats over the configured columns (else Hudi's default columns)."""
    out: dict[str, dict[str, object]] = {}
    v2 = table.config.version >= 9
    for p in partitions:
        if p.startswith(SECONDARY_INDEX_PREFIX) and p[len(SECONDARY_INDEX_PREFIX) :] in secondary:
            column = secondary[p[len(SECONDARY_INDEX_PREFIX) :]]
            out[p] = secondary_definition(p, column, v2)
        elif p == COLUMN_STATS and table.config.version >= 8:  # what Hudi records when it builds column stats
            columns = policy.columns or default_columns(read_schema(table, table.timeline()))
            out[p] = {
                "indexName": COLUMN_STATS,
                "indexType": COLUMN_STATS,
                "indexFunction": COLUMN_STATS,
                "sourceFields": list(columns),
                "indexOptions": {},
                **({"version": "V2"} if v2 else {}),
            }
    return out


def secondary_definition(partition: str, column: str, v2: bool) -> dict[str, object]:
    return {
        "indexName": partition,
        "indexType": "secondary_index",
        "indexFunction": "identity",
        "sourceFields": [column],
        "indexOptions": {},
        **({"version": "V2"} if v2 else {}),
    }


def run_indexing(ctx: TableContext, instant: Instant, lease: LockHandle | None = None) -> IndexingResult:
    """Execute one pending indexing plan through the commit path, key reads on the context's executor."""
    writer = spark_partition_writer(ctx.executor, ctx.table.name, instant.requested_time, ctx.storage_options)
    return execute_indexing(ctx.table, instant, lock=ctx.lock_factory(), lease=lease, writer=writer)
