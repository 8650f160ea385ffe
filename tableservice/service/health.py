"""Liveness and readiness of the daemon, as /healthz and /readyz report them."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["HealthState", "one_line"]

_MAX_REASON_CHARS = 300


def one_line(text: str) -> str:
    """`text` on one line, cut to a few hundred characters (for reasons and error texts in responses)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_REASON_CHARS else flat[: _MAX_REASON_CHARS - 3] + "..."


class HealthState:
    """What /healthz and /readyz report, updated by the service.

    Liveness: the service loop calls `beat()` on every turn; the daemon is alive while the last beat is at
    most `stale_after_seconds` old. Construction counts as a beat, so start-up has one threshold of grace.

    Readiness: `set_ready(True)` once the configuration is loaded, plus optional named checks (cheap,
    non-blocking callables such as "is the Spark session up"); every one must hold. Starts not ready.
    """

    def __init__(self, *, stale_after_seconds: float = 60.0, clock: Callable[[], float] | None = None) -> None:
        """`clock` is a monotonic clock in seconds (default: time.monotonic)."""
        if not stale_after_seconds > 0:
            raise ValueError(f"stale_after_seconds must be positive, got {stale_after_seconds!r}")
        self._clock = clock if clock is not None else time.monotonic
        self._stale_after = float(stale_after_seconds)
        self._last_beat = self._clock()
        self._ready = False
        self._not_ready_reason = "starting"
        self._checks: dict[str, Callable[[], bool]] = {}

    @property
    def stale_after_seconds(self) -> float:
        return self._stale_after

    def beat(self) -> None:
        """The service loop is alive."""
        self._last_beat = self._clock()

    def seconds_since_beat(self) -> float:
        return max(0.0, self._clock() - self._last_beat)

    def liveness(self) -> tuple[bool, str]:
        """(alive, one-line explanation)."""
        age = self.seconds_since_beat()
        if age <= self._stale_after:
            return True, f"ok: last heartbeat {age:.1f}s ago"
        return False, f"stale: last heartbeat {age:.1f}s ago (threshold {self._stale_after:g}s)"

    def set_ready(self, ready: bool, reason: str = "") -> None:
        """Whether the service is ready; `reason` says why not (e.g. "config not loaded", "shutting down")."""
        self._ready = ready
        self._not_ready_reason = one_line(reason) or "not ready"

    def add_readiness_check(self, name: str, check: Callable[[], bool]) -> None:
        """Also require `check()` to be true (replaces a check of the same name); it must not block."""
        self._checks[name] = check

    def remove_readiness_check(self, name: str) -> None:
        self._checks.pop(name, None)

    def readiness(self) -> tuple[bool, str]:
        """(ready, one-line explanation)."""
        if not self._ready:
            return False, f"not ready: {self._not_ready_reason}"
        for name, check in list(self._checks.items()):
            try:
                ok = check()
            except Exception as exc:
                return False, one_line(f"not ready: {name} check failed: {type(exc).__name__}: {exc}")
            if not ok:
                return False, f"not ready: {name}"
        return True, "ready"
