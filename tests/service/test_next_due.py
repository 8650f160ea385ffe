"""/status says per service whether it is due, why, and when a time trigger next fires; `tableservice status`
prints it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tableservice.cli.status_cmd import render
from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action, parse_instant_time, timeline_timezone
from tableservice.locks import InProcessLockProvider
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.clustering.policy import ClusteringPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.protocol import ServiceSettings
from tableservice.service.table_worker import TableSettings, TableWorker
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table


def test_status_shows_each_service_due_reason_and_next_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = mor_table(tmp_path / "t", records=80, commits=3)
    table = HudiTable.open(Storage(), path)
    timeline = table.timeline()
    deltas = [i for i in timeline.completed_writes() if i.action is Action.DELTA_COMMIT]
    first = parse_instant_time(deltas[0].requested_time, timeline_timezone(table.config.timezone_name))
    compaction = CompactionPolicy.from_mapping(
        {
            "hoodie.compact.inline.trigger.strategy": "NUM_OR_TIME",
            "hoodie.compact.inline.max.delta.seconds": 7200,
            "hoodie.compact.inline.max.delta.commits": 50,
        }
    )
    settings = TableSettings(
        uri=path,
        name="t",
        compaction=ServiceSettings(compaction, execute=False),
        clustering=ServiceSettings(ClusteringPolicy(), schedule=False),
        clean=ServiceSettings(CleanPolicy(max_commits=40)),
        archival=ServiceSettings(ArchivalPolicy(min_commits=1, max_commits=2, cleaner_commits_retained=1)),
    )
    worker = TableWorker(settings, Storage(), InProcessLockProvider(), SparkExecutor(SparkSettings()))
    worker.poll()
    assert worker.needs_pass()  # archival: more completed commits than hoodie.keep.max.commits
    due = worker.status.to_json()["due"]
    assert isinstance(due, dict)

    expected_at = datetime.fromtimestamp(int(first.timestamp()) + 7200, UTC)
    assert due["compaction"]["due"] is False
    assert due["compaction"]["next_due_at"] == expected_at.isoformat(timespec="seconds")
    assert (
        f"{len(deltas)} delta commits since first delta commit {deltas[0].requested_time}"
        in due["compaction"]["reason"]
    )

    completed = len(timeline.completed_writes())
    assert due["clean"] == {
        "due": False,
        "reason": f"not due: {completed} completed commits in the active timeline (no clean yet), "
        "hoodie.clean.max.commits=40",
        "next_due_at": None,
    }
    assert due["archival"]["due"] is True
    assert (
        f"{completed} completed commits on the active timeline, hoodie.keep.max.commits=2" in due["archival"]["reason"]
    )
    assert due["clustering"]["due"] is False and "schedule: false" in due["clustering"]["reason"]
    assert expected_at - datetime.now(UTC) > timedelta(0)  # the table was written just now: not yet due by time

    code = render({"tables": [worker.status.to_json() | {"health": "ok"}]}, as_json=False)
    out = capsys.readouterr().out
    assert code == 0
    assert (
        f"  compaction: next due at {expected_at.isoformat(timespec='seconds')} unless commits make it due sooner"
        in out
    )
    assert f"  archival: due now ({completed} completed commits on the active timeline" in out
    assert "  clean: not due: " in out
