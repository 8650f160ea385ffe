"""The process's own time zone, with its rules, for timelines whose zone is `LOCAL`.

Hudi's `hoodie.table.timeline.timezone=LOCAL` (the default) makes and reads instant times in the JVM's default zone
(`ZoneId.systemDefault()`), daylight saving included: an instant time written in July carries summer time's offset,
one written in January winter's, whenever it is read. A fixed offset taken once at start-up would read half of a
year's instants an hour off and, across a change of the clocks, make new instant times an hour off the writers'.

`ProcessLocalZone` asks the C library (TZ, else /etc/localtime: the zone Java takes on Linux too) for the offset at
each moment. A wall-clock time that the change of the clocks makes ambiguous or skips reads as Java's
`LocalDateTime.atZone` reads it: in the hour that repeats, the earlier moment (the offset before the change); in the
hour that is skipped, the offset before the change too, so the time moves forward by the gap. `fold=1` (PEP 495)
picks the offset after the change instead.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, tzinfo

_EPOCH = datetime(1970, 1, 1)
_SECOND = timedelta(seconds=1)
_DAY = 86_400  # seconds: the offsets a day before and after a wall time bracket any change of the clocks near it


def _offset_at(epoch_seconds: int) -> int:
    """The zone's UTC offset, in seconds, at a moment."""
    return time.localtime(epoch_seconds).tm_gmtoff


def _seconds(dt: datetime) -> int:
    """A datetime's fields as seconds since 1970-01-01 00:00, as if they were UTC (sub-second parts dropped)."""
    return (dt.replace(tzinfo=None, fold=0) - _EPOCH) // _SECOND


class ProcessLocalZone(tzinfo):
    """The process's local zone, its offset looked up for each moment (see the module's docstring)."""

    def utcoffset(self, dt: datetime | None) -> timedelta:
        if dt is None:
            return timedelta(seconds=_offset_at(int(time.time())))
        wall = _seconds(dt)
        before, after = _offset_at(wall - _DAY), _offset_at(wall + _DAY)
        if before == after:  # no change of the clocks near this time (nearly always)
            return timedelta(seconds=before)
        before_fits, after_fits = _offset_at(wall - before) == before, _offset_at(wall - after) == after
        if before_fits != after_fits:
            return timedelta(seconds=before if before_fits else after)
        # both fit: the repeated hour; neither: the skipped hour
        return timedelta(seconds=after if dt.fold else before)

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None  # not known apart from the offset; nothing here needs it

    def tzname(self, dt: datetime | None) -> str:
        moment = int(time.time()) if dt is None else _seconds(dt) - int(self.utcoffset(dt) // _SECOND)
        return time.localtime(moment).tm_zone

    def fromutc(self, dt: datetime) -> datetime:
        if dt.tzinfo is not self:
            raise ValueError("fromutc: dt.tzinfo is not self")
        offset = _offset_at(_seconds(dt))
        local = dt.replace(tzinfo=None) + timedelta(seconds=offset)
        first = local.replace(tzinfo=self)
        # the second pass of a repeated hour: fold=1, so that reading the wall time back gives this moment
        if int(first.utcoffset() // _SECOND) != offset:  # type: ignore[operator]
            return local.replace(tzinfo=self, fold=1)
        return first

    def __repr__(self) -> str:
        return f"ProcessLocalZone({'/'.join(time.tzname)})"

    def __str__(self) -> str:
        return "/".join(dict.fromkeys(time.tzname))
