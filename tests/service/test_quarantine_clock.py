"""A table's quarantine ends on the monotonic clock: the wall clock stepped back (NTP, a resumed VM) does not make
it longer, stepped forward does not end it early; the status keeps showing the wall-clock end."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tableservice.service import table_loop
from tableservice.service.table_loop import TableLoop
from tableservice.service.table_state import TableStatus


def test_a_quarantine_lasts_its_length_whatever_the_wall_clock_does(monkeypatch: pytest.MonkeyPatch) -> None:
    wall, mono = [1_800_000_000.0], [5_000.0]
    monkeypatch.setattr(table_loop, "time", SimpleNamespace(time=lambda: wall[0], monotonic=lambda: mono[0]))
    status = TableStatus(uri="/data/t", name="t")
    task: Any = SimpleNamespace(worker=SimpleNamespace(status=status), quarantine_ends=None)  # a TableTask's fields
    assert TableLoop._quarantine_left(task) == 0.0 and task.quarantine_ends is None

    status.quarantined_until = wall[0] + 3600  # as a pass sets it
    assert TableLoop._quarantine_left(task) == 3600
    wall[0] -= 86_400  # the clock is stepped back a day
    mono[0] += 600
    assert TableLoop._quarantine_left(task) == 3000
    wall[0] += 2 * 86_400  # and forward two
    mono[0] += 2999
    assert TableLoop._quarantine_left(task) == 1
    mono[0] += 1
    assert TableLoop._quarantine_left(task) == 0
    assert status.quarantined_until == 1_800_003_600.0  # what the status shows is left as it was set
    # lifted (as the loop lifts it, or anyone), then quarantined again: counted afresh
    status.quarantined_until = None
    assert TableLoop._quarantine_left(task) == 0.0 and task.quarantine_ends is None
    status.quarantined_until = wall[0] + 60
    assert TableLoop._quarantine_left(task) == 60
