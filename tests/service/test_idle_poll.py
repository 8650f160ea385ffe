"""What an idle poll still reports once it stopped redoing work: the pending and held-back gauges of every service
(set once, then left as they are while nothing changes), a hold and what planning found kept across equal settings
(a discovery rescan), both dropped when the settings change; a timeline listed again unchanged is the same one."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from tableservice.errors import CorruptFileError
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.locks import InProcessLockProvider
from tableservice.metrics import Metrics
from tableservice.service.table_worker import TableSettings, TableWorker
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table
from tests.support.instant_times import shifted


def _worker(path: Path) -> tuple[TableWorker, CollectorRegistry]:
    location = mor_table(path, records=60, commits=2)
    registry = CollectorRegistry()
    no_spark: Any = None  # an idle poll never runs an action
    worker = TableWorker(
        TableSettings(uri=location, name="idle"), Storage(), InProcessLockProvider(), no_spark, Metrics(registry)
    )
    return worker, registry


def test_idle_polls_keep_every_gauge_and_a_hold_survives_equal_settings(tmp_path: Path) -> None:
    worker, registry = _worker(tmp_path / "t")
    for _ in range(3):
        worker.poll()
        worker.needs_pass()
    services = [svc.name for svc in worker.services()]
    assert "compaction" in services and "clean" in services
    for name in services:
        labels = {"table": "idle", "action": name}
        assert registry.get_sample_value("tableservice_actions_held_back", labels) == 0.0
    for name in ("compaction", "clustering", "clean"):
        assert registry.get_sample_value("tableservice_pending_actions", {"table": "idle", "action": name}) == 0.0

    worker._hold("compaction", "20200101000000000", CorruptFileError("bad bytes", path="x"))
    worker.poll()
    worker.needs_pass()
    held = {"table": "idle", "action": "compaction"}
    assert registry.get_sample_value("tableservice_actions_held_back", held) == 1.0
    worker.settings = replace(worker.settings)  # equal settings: a rescan found the table as it was
    worker.needs_pass()
    assert [h["instant"] for h in worker.status.held_back] == ["20200101000000000"]
    assert registry.get_sample_value("tableservice_actions_held_back", held) == 1.0
    worker.settings = replace(worker.settings, lock_timeout_s=worker.settings.lock_timeout_s + 1)  # changed
    worker.needs_pass()
    assert worker.status.held_back == []
    assert registry.get_sample_value("tableservice_actions_held_back", held) == 0.0


def test_a_timeline_listed_again_unchanged_is_the_same_one_and_a_new_file_shows(tmp_path: Path) -> None:
    location = mor_table(tmp_path / "t", records=60, commits=2)
    table = HudiTable.open(Storage(), location)
    first = table.active.load()
    assert table.active.load() is first
    requested = max(i.requested_time for i in first.instants)
    later = shifted(requested, 1)
    Storage().write_bytes(f"{table.active.folder}/{later}.deltacommit.requested", b"")
    second = table.active.load()
    assert second is not first
    assert [i.requested_time for i in second.instants] == [*(i.requested_time for i in first.instants), later]
