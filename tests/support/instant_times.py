"""Instant times a few milliseconds from another, as valid times (adding 1 to the digits can make second 60)."""

from __future__ import annotations

from datetime import UTC, timedelta

from tableservice.hudi.timeline.instant import format_instant_time, parse_instant_time


def shifted(t: str, millis: int) -> str:
    """The 17-digit instant time `millis` milliseconds after `t` (before it when negative)."""
    return format_instant_time(parse_instant_time(t, UTC) + timedelta(milliseconds=millis), UTC)
