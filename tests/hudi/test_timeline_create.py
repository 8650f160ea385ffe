"""Creating timeline files: an instant another process requested at the same time is a retryable conflict (the next
attempt takes a new time); a state file that exists already is a permanent timeline error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tableservice.errors import ConflictError, InvalidTimelineError
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action, Instant, State
from tableservice.storage import Storage
from tests.support.trip_tables import create_trip_table


def test_an_instant_requested_twice_is_a_retryable_conflict_and_a_state_twice_is_not(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    create_trip_table(path, 9, TableType.MERGE_ON_READ, name="trips")
    table = HudiTable.open(Storage(), path)
    t = table.active.new_instant_time(table.reload())
    first = table.active.create_requested(t, Action.CLEAN, b"the first plan")
    with pytest.raises(ConflictError) as caught:
        table.active.create_requested(t, Action.CLEAN, b"a second plan")
    error = caught.value
    assert error.retryable and error.table == "trips"
    assert error.path == str(Path(path) / ".hoodie" / "timeline" / f"{t}.clean.requested")
    assert table.active.read_plan(first) == b"the first plan"  # the first one's plan is kept as it was
    inflight = table.active.transition_to_inflight(first)
    assert inflight == Instant(t, Action.CLEAN, State.INFLIGHT)
    with pytest.raises(InvalidTimelineError) as again:
        table.active.transition_to_inflight(first)
    assert not again.value.retryable and "already exists" in again.value.problem
