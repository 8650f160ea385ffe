"""The cost ledger's counters: what each action cost (executor seconds, object-store requests by kind) and what it
bought readers (the read path of the file groups it rewrote, before and after). The same figures are kept per
action in the daemon's history and summed by `tableservice report`.

Read amplification over any window is `rate(files_before) / rate(file_groups_before)` against
`rate(files_after) / rate(file_groups_after)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.metrics import MetricWrapperBase

from tableservice.config.cost import REQUEST_KINDS

_M = TypeVar("_M", bound=MetricWrapperBase)


class _Child(Protocol):
    def __call__(self, metric: _M, table: str, *rest: str) -> _M: ...


class LedgerMetrics:
    """Counters labelled by table and action (requests also by kind); `child` is `Metrics._child`, which keeps
    track of a table's series for `forget_table`."""

    def __init__(self, registry: CollectorRegistry, namespace: str, child: _Child) -> None:
        self._child = child
        ta = ("table", "action")
        reg = registry

        def counter(suffix: str, text: str, labels: tuple[str, ...] = ta) -> Counter:
            return Counter(f"{namespace}_{suffix}", text, labels, registry=reg)

        self._executor_seconds = counter(
            "executor_seconds", "Run time of the action's tasks on Spark executors, summed over tasks"
        )
        self._requests = counter(
            "action_requests", "Object-store requests made by the action's tasks, by kind", ("table", "action", "kind")
        )
        self._log_files_removed = counter(
            "read_path_log_files_removed", "Log files no reader merges any more after a compaction or clustering"
        )
        self._log_bytes_removed = counter(
            "read_path_log_bytes_removed",
            "Bytes of log files no reader merges any more after a compaction or clustering",
        )
        self._groups_before = counter("read_path_file_groups_before", "File groups an action rewrote")
        self._groups_after = counter("read_path_file_groups_after", "File groups those actions left in their place")
        self._files_before = counter(
            "read_path_files_before", "Base and log files a reader opened for the file groups an action rewrote"
        )
        self._files_after = counter("read_path_files_after", "Files a reader opens for them afterwards")

    def record_cost(self, table: str, action: str, *, executor_seconds: float, requests: Mapping[str, int]) -> None:
        unknown = sorted(set(requests) - set(REQUEST_KINDS))
        if unknown:
            raise ValueError(f"unknown request kinds {unknown}: expected {', '.join(REQUEST_KINDS)}")
        if executor_seconds < 0 or any(v < 0 for v in requests.values()):
            raise ValueError(f"negative cost: {executor_seconds} executor seconds, requests {dict(requests)}")
        self._child(self._executor_seconds, table, action).inc(executor_seconds)
        for kind in REQUEST_KINDS:
            self._child(self._requests, table, action, kind).inc(requests.get(kind, 0))

    def record_benefit(
        self,
        table: str,
        action: str,
        *,
        file_groups_before: int,
        file_groups_after: int,
        files_before: int,
        files_after: int,
        log_files_removed: int,
        log_bytes_removed: int,
    ) -> None:
        amounts = (
            (self._groups_before, file_groups_before),
            (self._groups_after, file_groups_after),
            (self._files_before, files_before),
            (self._files_after, files_after),
            (self._log_files_removed, log_files_removed),
            (self._log_bytes_removed, log_bytes_removed),
        )
        if any(amount < 0 for _, amount in amounts):
            raise ValueError(f"negative read-path benefit for {table} {action}: {[a for _, a in amounts]}")
        for metric, amount in amounts:
            self._child(metric, table, action).inc(amount)
