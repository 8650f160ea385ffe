"""`LOCAL` timelines read and make instant times with the offset of each instant's own moment, as Java's system
default zone does, daylight saving included. The process's zone is set through TZ with POSIX rules (no zone files
needed for the C library); the IANA zones of the same rules, through `zoneinfo`, are the independent answer."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tableservice.hudi.timeline.instant import (
    format_instant_time,
    instant_epoch_ms,
    next_instant_time,
    parse_instant_time,
    timeline_timezone,
)
from tableservice.hudi.timeline.zone import ProcessLocalZone

# POSIX TZ rules and the IANA zone that has had them since 2007 (New York) or longer
ZONES = {
    "Europe/Berlin": "CET-1CEST,M3.5.0,M10.5.0/3",
    "America/New_York": "EST5EDT,M3.2.0,M11.1.0",
    "Australia/Sydney": "AEST-10AEDT,M10.1.0,M4.1.0/3",
    "Australia/Lord_Howe": "<+1030>-10:30<+11>-11,M10.1.0,M4.1.0",  # a half-hour change
    "Asia/Kolkata": "IST-5:30",  # no daylight saving
}

# each zone's offsets from UTC in those years, in hours
OFFSETS = {
    "Europe/Berlin": (1, 2),
    "America/New_York": (-5, -4),
    "Australia/Sydney": (10, 11),
    "Australia/Lord_Howe": (10.5, 11),
    "Asia/Kolkata": (5.5,),
}


@pytest.fixture()
def process_zone(request: pytest.FixtureRequest) -> Iterator[ZoneInfo]:
    """The process's zone set to `request.param`'s rules for the test; yields the IANA zone to compare with."""
    name = request.param
    saved = os.environ.get("TZ")
    os.environ["TZ"] = ZONES[name]
    time.tzset()
    try:
        yield ZoneInfo(name)
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()


def _walls_around_changes(year: int) -> Iterator[datetime]:
    """Every 10 minutes over the days around each change of the clocks in `year` (both hemispheres), and a few
    ordinary days."""
    days = [datetime(year, m, d) for m, d in ((3, 7), (3, 28), (4, 4), (10, 3), (10, 24), (10, 31), (11, 1))]
    days += [datetime(year, 1, 15), datetime(year, 7, 15), datetime(year, 3, 8), datetime(year, 11, 7)]
    for day in days:
        for step in range(0, 2 * 24 * 60, 10):
            yield day + timedelta(minutes=step)


@pytest.mark.parametrize("process_zone", list(ZONES), indirect=True)
def test_offsets_of_wall_times_are_the_zones_own_in_every_hour_the_clocks_change(process_zone: ZoneInfo) -> None:
    local = ProcessLocalZone()
    met: set[timedelta | None] = set()
    for year in (2025, 2026, 2027):
        for wall in _walls_around_changes(year):
            for fold in (0, 1):
                mine = wall.replace(tzinfo=local, fold=fold).utcoffset()
                theirs = wall.replace(tzinfo=process_zone, fold=fold).utcoffset()
                assert mine == theirs, (wall, fold)
                met.add(mine)
    assert met == {timedelta(hours=h) for h in OFFSETS[process_zone.key]}  # the walk crossed every change


@pytest.mark.parametrize("process_zone", list(ZONES), indirect=True)
def test_moments_convert_to_the_zones_wall_time_and_fold(process_zone: ZoneInfo) -> None:
    local = ProcessLocalZone()
    for year in (2025, 2026, 2027):
        for wall in _walls_around_changes(year):
            moment = wall.replace(tzinfo=UTC)
            mine, theirs = moment.astimezone(local), moment.astimezone(process_zone)
            assert (mine.replace(tzinfo=None), mine.fold) == (theirs.replace(tzinfo=None), theirs.fold), moment
            assert mine.astimezone(UTC) == moment  # and back: the same moment (`==` across zones is False in a
            # repeated hour, by PEP 495)


@pytest.mark.parametrize("process_zone", ["Europe/Berlin"], indirect=True)
def test_local_instant_times_carry_their_own_seasons_offset(process_zone: ZoneInfo) -> None:
    tz = timeline_timezone("LOCAL")
    summer, winter = "20260715120000000", "20260115120000000"
    assert parse_instant_time(summer, tz) == datetime(2026, 7, 15, 10, tzinfo=UTC)
    assert parse_instant_time(winter, tz) == datetime(2026, 1, 15, 11, tzinfo=UTC)
    assert instant_epoch_ms(summer, tz) - instant_epoch_ms(winter, tz) == (181 * 24 - 1) * 3_600_000
    assert format_instant_time(datetime(2026, 7, 15, 10, tzinfo=UTC), tz) == summer
    assert format_instant_time(datetime(2026, 1, 15, 11, tzinfo=UTC), tz) == winter
    # The repeated hour of 25 October 2026 reads as its first pass (Java's atZone); the skipped hour of 29 March
    # reads forward by the gap.
    assert parse_instant_time("20261025023000000", tz).astimezone(UTC) == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert parse_instant_time("20260329023000000", tz).astimezone(UTC) == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    assert format_instant_time(datetime(2026, 3, 29, 1, 30, tzinfo=UTC), tz) == "20260329033000000"
    # A new instant time on a day of summer time carries summer time's offset, whatever the season the process
    # started in.
    now = datetime(2026, 7, 15, 10, 0, 0, 5000, tzinfo=UTC)
    assert next_instant_time(["20260715115959000"], tz, now) == "20260715120000005"


def test_utc_timelines_stay_utc() -> None:
    assert timeline_timezone("UTC") is UTC and timeline_timezone("utc") is UTC
    assert isinstance(timeline_timezone("LOCAL"), ProcessLocalZone)
    assert isinstance(timeline_timezone(None), ProcessLocalZone)
