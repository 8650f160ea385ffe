"""What a table's worker holds back after permanent failures: one pending instant of an action (a bad plan, a
corrupt file), or a whole service of the table (damaged committed data: every action of that service would rewrite
it or plan around it). A hold runs out after the table's `permanent_failure_hold_s`, or when the settings change."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from tableservice.errors import DamagedInputError, TableServiceError
from tableservice.hudi.timeline.instant import Instant

#: The instant of a hold that covers a whole service of the table.
SERVICE_WIDE = "*"


@dataclass(frozen=True)
class Held:
    until: float  # monotonic
    until_unix: float
    error: str


class Holds:
    """(action, instant or SERVICE_WIDE) -> Held."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], Held] = {}

    def clear(self) -> None:
        self._held.clear()

    def expire(self) -> bool:
        """Drop the holds that ran out; True when one did."""
        if not self._held:  # asked several times per poll: nearly always nothing is held
            return False
        now = time.monotonic()
        gone = [k for k, held in self._held.items() if held.until <= now]
        for key in gone:
            del self._held[key]
        return bool(gone)

    def add(self, action: str, instant: str, error: TableServiceError, hold_s: float) -> str:
        """Hold `instant` of `action` (the whole service for damaged input); returns what was held."""
        if isinstance(error, DamagedInputError):
            instant = SERVICE_WIDE
        self._held[(action, instant)] = Held(time.monotonic() + hold_s, time.time() + hold_s, str(error))
        return instant

    def service_held(self, service: str) -> bool:
        return (service, SERVICE_WIDE) in self._held

    def runnable(self, service: str, pending: Iterable[Instant]) -> list[Instant]:
        if self.service_held(service):
            return []
        return [i for i in pending if (service, i.requested_time) not in self._held]

    def held_back(self) -> list[dict[str, object]]:
        """Instants held back, as /status shows them."""
        return [
            {"action": a, "instant": t, "until": round(h.until_unix, 1), "error": h.error}
            for (a, t), h in sorted(self._held.items())
            if t != SERVICE_WIDE
        ]

    def quarantined_services(self) -> dict[str, dict[str, object]]:
        """Services held for the whole table, as /status shows them."""
        return {
            a: {"until": round(h.until_unix, 1), "reason": h.error}
            for (a, t), h in sorted(self._held.items())
            if t == SERVICE_WIDE
        }

    def count(self, service: str) -> int:
        """Instants of `service` held back (not counting a service-wide hold)."""
        return sum(1 for a, t in self._held if a == service and t != SERVICE_WIDE)
