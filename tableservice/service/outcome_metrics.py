"""What one executed action adds to the metrics: its effects (files cleaned, instants archived, failed writes
rolled back, last success), its I/O, its cost (executor seconds, requests) and its read-path benefit."""

from __future__ import annotations

import time
from dataclasses import asdict

from tableservice.metrics import Metrics
from tableservice.service.protocol import Outcome


def record_outcome(metrics: Metrics, table: str, service: str, outcome: Outcome) -> None:
    metrics.record_effects(
        table,
        service,
        finished_at=time.time(),
        files_deleted=outcome.files_deleted,
        bytes_deleted=outcome.bytes_deleted,
        instants_archived=outcome.instants_archived,
        failed_writes_rolled_back=outcome.failed_writes_rolled_back,
    )
    if outcome.executor_seconds or outcome.requests:
        metrics.ledger.record_cost(
            table, service, executor_seconds=outcome.executor_seconds, requests=dict(outcome.requests)
        )
    if outcome.benefit is not None:
        metrics.ledger.record_benefit(table, service, **asdict(outcome.benefit))
    if outcome.bytes_read or outcome.bytes_written or outcome.records_read or outcome.records_written:
        metrics.record_io(
            table,
            service,
            bytes_read=outcome.bytes_read,
            bytes_written=outcome.bytes_written,
            records_read=outcome.records_read,
            records_written=outcome.records_written,
            log_files_compacted=outcome.log_files_compacted,
        )
