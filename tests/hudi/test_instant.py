from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tableservice.errors import InvalidTimelineError
from tableservice.hudi.timeline.active import build_timeline
from tableservice.hudi.timeline.instant import (
    Action,
    Instant,
    State,
    format_instant_time,
    instant_epoch_ms,
    next_instant_time,
    parse_instant_file_name,
    parse_instant_time,
)
from tableservice.storage import FileInfo

UTC = UTC
times = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2099, 12, 31)).map(
    lambda d: format_instant_time(d.replace(tzinfo=UTC), UTC)
)
actions = st.sampled_from(list(Action))
states = st.sampled_from(list(State))


@given(times, actions, states, st.sampled_from([1, 2]), times)
def test_file_name_round_trip(t: str, action: Action, state: State, layout: int, done: str) -> None:
    if action is Action.SAVEPOINT and state is State.REQUESTED:
        return
    inst = Instant(t, action, state, done if state is State.COMPLETED and layout == 2 else None)
    parsed = parse_instant_file_name(inst.file_name(layout))
    assert parsed is not None
    assert parsed.requested_time == t
    assert parsed.state is state
    if state is State.COMPLETED:
        assert parsed.action is inst.completed_action(layout)
        assert parsed.completion_time == inst.completion_time
    elif state is State.INFLIGHT and action is Action.COMMIT:
        assert parsed.action is Action.COMMIT
    else:
        assert parsed.action is action


def test_known_names() -> None:
    assert parse_instant_file_name("20240418173550988.inflight") == Instant(
        "20240418173550988", Action.COMMIT, State.INFLIGHT
    )
    c = parse_instant_file_name("20251220210129235_20251220210129883.commit")
    assert c is not None and c.completion_time == "20251220210129883"
    for junk in ("hoodie.properties", "archived", "2024.commit", "20240418173550988.commit.crc", ".aux"):
        assert parse_instant_file_name(junk) is None


@given(st.lists(times, max_size=20), times)
def test_next_instant_time_is_strictly_greater(existing: list[str], now: str) -> None:
    moment = parse_instant_time(now, UTC)
    t = next_instant_time(existing, UTC, moment)
    assert len(t) == 17
    assert all(t > e for e in existing)
    assert t >= now
    parse_instant_time(t, UTC)  # a valid date


def test_next_instant_time_carries_into_seconds() -> None:
    assert next_instant_time(["20250101235959999"], UTC, datetime(2000, 1, 1, tzinfo=UTC)) == "20250102000000000"


def test_legacy_14_digit_times() -> None:
    # read as the second's last millisecond, as Hudi reads it ("999" appended); the next time is after that second
    assert parse_instant_time("20240102030405", UTC) == datetime(2024, 1, 2, 3, 4, 5, 999_000, tzinfo=UTC)
    assert next_instant_time(["20990102030405"], UTC, datetime(2000, 1, 1, tzinfo=UTC)) == "20990102030406000"
    assert instant_epoch_ms("20240102030405", UTC) == 1_704_164_645_999  # a legacy base instant's record-index time


def test_invalid_time_is_typed() -> None:
    with pytest.raises(InvalidTimelineError, match="20241399"):
        parse_instant_time("20241399000000000", UTC)


def _fi(name: str) -> FileInfo:
    return FileInfo(location=f"/t/.hoodie/{name}", size=0, mtime_ms=1, is_dir=False)


def test_build_timeline_reconciles_compaction_and_clustering() -> None:
    names = [
        "001000000000000000.deltacommit.requested"[1:],
        "20250101000000000.compaction.requested",
        "20250101000000000.compaction.inflight",
        "20250101000000000_20250101000001000.commit",
        "20250102000000000.clustering.requested",
        "20250102000000000.clustering.inflight",
        "20250102000000000_20250102000001000.replacecommit",
        "20250103000000000.commit.requested",
        "20250103000000000.inflight",
        "20250104000000000.compaction.requested",
    ]
    tl = build_timeline([_fi(n) for n in names], 2)
    by = tl.by_time()
    assert by["20250101000000000"] == Instant("20250101000000000", Action.COMPACTION, State.COMPLETED)
    assert by["20250101000000000"].completion_time == "20250101000001000"
    assert by["20250102000000000"].action is Action.CLUSTERING and by["20250102000000000"].is_completed
    assert by["20250103000000000"] == Instant("20250103000000000", Action.COMMIT, State.INFLIGHT)
    assert [i.requested_time for i in tl.pending_compactions()] == ["20250104000000000"]
    assert tl.completion_time("20250102000000000") == "20250102000001000"


def test_two_actions_requested_at_one_time_are_refused_not_merged() -> None:
    """A writer's delta commit and a compaction at the same millisecond: merged, one of them would vanish from the
    timeline (the compaction's plan never run, its file groups planned again)."""
    names = [
        "20250101000000000.deltacommit.requested",
        "20250101000000000.deltacommit.inflight",
        "20250101000000000.compaction.requested",
        "20250102000000000.commit.requested",
    ]
    with pytest.raises(InvalidTimelineError) as caught:
        build_timeline([_fi(n) for n in names], 2, table="trips")
    error = caught.value
    assert error.table == "trips" and error.path == "/t/.hoodie/20250101000000000.compaction.requested"
    assert error.problem.startswith(
        "two actions are requested at instant time 20250101000000000 "
        "(20250101000000000.deltacommit.requested and 20250101000000000.compaction.requested)"
    )
    # a savepoint at a commit's time is no clash, nor are the requested and inflight files of one action
    fine = ["20250101000000000.commit.requested", "20250101000000000.inflight", "20250101000000000.savepoint.inflight"]
    assert [(i.action, i.state) for i in build_timeline([_fi(n) for n in fine], 1).instants] == [
        (Action.COMMIT, State.INFLIGHT),
        (Action.SAVEPOINT, State.INFLIGHT),
    ]


def test_views_of_a_timeline_are_made_once_and_match_their_filters() -> None:
    names = [
        "20250101000000000.compaction.requested",
        "20250101000000000_20250101000001000.commit",
        "20250102000000000.deltacommit.inflight",
        "20250103000000000.compaction.requested",
        "20250104000000000.clean.requested",
    ]
    tl = build_timeline([_fi(n) for n in names], 2)
    assert [i.requested_time for i in tl.completed()] == ["20250101000000000"]
    assert [i.requested_time for i in tl.pending()] == ["20250102000000000", "20250103000000000", "20250104000000000"]
    assert [i.requested_time for i in tl.pending_of(Action.COMPACTION)] == ["20250103000000000"]
    assert [i.requested_time for i in tl.pending_of(Action.CLEAN)] == ["20250104000000000"]
    assert tl.pending_of(Action.CLUSTERING).instants == ()
    assert tl.completed() is tl.completed() and tl.pending_of(Action.CLEAN) is tl.pending_of(Action.CLEAN)
    # a filtered timeline has views of its own
    assert tl.pending().completed().instants == () and tl.completed().pending().instants == ()
    assert tl == build_timeline([_fi(n) for n in names], 2)  # the views take no part in equality


def test_savepoint_keeps_its_commit_visible() -> None:
    names = [
        "20250101000000000.commit.requested",
        "20250101000000000.inflight",
        "20250101000000000_20250101000001000.commit",
        "20250101000000000.savepoint.inflight",
        "20250101000000000_20250101000009000.savepoint",
        "20250102000000000.commit.requested",
        "20250102000000000.inflight",
        "20250102000000000_20250102000001000.commit",
    ]
    tl = build_timeline([_fi(n) for n in names], 2)
    assert [(i.requested_time, i.action) for i in tl] == [
        ("20250101000000000", Action.COMMIT),
        ("20250101000000000", Action.SAVEPOINT),
        ("20250102000000000", Action.COMMIT),
    ]
    assert tl.get("20250101000000000") == Instant("20250101000000000", Action.COMMIT, State.COMPLETED)
    assert [i.requested_time for i in tl.savepoints()] == ["20250101000000000"]
    # The savepointed commit stays active; the commits timeline starts after it for archival purposes.
    assert tl.commits_start() == "20250102000000000"
    assert tl.is_before_start("20241231000000000")


def test_instant_times_read_as_strptime_reads_them() -> None:
    """Instant times are read field by field (no strptime on every poll): the same moments, the same refusals."""
    from datetime import datetime as dt
    from datetime import timedelta, timezone

    from tableservice.errors import InvalidTimelineError
    from tableservice.hudi.timeline.instant import parse_instant_time

    zone = timezone(timedelta(hours=-5))
    for ts in ("20240229235959999", "19700101000000", "20261126021120176", "00010101000000000", "2024010203040506789"):
        expected = dt.strptime(ts[:14], "%Y%m%d%H%M%S").replace(tzinfo=zone)
        millis = int(ts[14:17]) if len(ts) >= 17 else 999
        assert parse_instant_time(ts, zone) == expected + timedelta(milliseconds=millis)
    for bad in ("20230229000000000", "20241301000000", "20240101246000000", "2024010100000"):
        with pytest.raises(InvalidTimelineError):
            parse_instant_time(bad, zone)
