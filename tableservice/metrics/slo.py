"""SLO metrics per table and target: compliance (1 while the value is within the target), seconds to breach
(negative: how long it has been breached; +Inf when nothing grows) and breaches (counted when a target goes from
met to breached, including a table's first reading)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics import MetricWrapperBase

from tableservice.planning.slo import SloReading

_M = TypeVar("_M", bound=MetricWrapperBase)


class _Child(Protocol):
    def __call__(self, metric: _M, table: str, *rest: str) -> _M: ...


class SloMetrics:
    """Labelled by table and target; `child` is `Metrics._child` (a table's series go with `forget_table`)."""

    def __init__(self, registry: CollectorRegistry, namespace: str, child: _Child) -> None:
        self._child = child
        tt = ("table", "target")
        self._compliant = Gauge(
            f"{namespace}_slo_compliant", "1 while the table meets the SLO target, 0 once it is breached", tt,
            registry=registry,
        )  # fmt: skip
        self._time_to_breach = Gauge(
            f"{namespace}_slo_time_to_breach_seconds",
            "Seconds before the target is breached at the current rate (negative: breached that long ago)",
            tt,
            registry=registry,
        )
        self._breaches = Counter(
            f"{namespace}_slo_breaches", "Times the target went from met to breached", tt, registry=registry
        )
        self._breached: dict[tuple[str, str], bool] = {}
        self._guard = threading.Lock()

    def report(self, table: str, readings: Sequence[SloReading]) -> list[str]:
        """Set the gauges from one poll's readings; returns the targets that have just been breached."""
        new: list[str] = []
        for reading in readings:
            target = reading.target.value
            self._child(self._compliant, table, target).set(0.0 if reading.breached else 1.0)
            self._child(self._time_to_breach, table, target).set(reading.time_to_breach)
            breaches = self._child(self._breaches, table, target)
            with self._guard:
                was = self._breached.get((table, target), False)
                self._breached[(table, target)] = reading.breached
            if reading.breached and not was:
                breaches.inc()
                new.append(target)
        return new

    def forget(self, table: str) -> None:
        with self._guard:
            for key in [k for k in self._breached if k[0] == table]:
                del self._breached[key]
