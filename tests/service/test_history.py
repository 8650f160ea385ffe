"""The action history's store: what goes in comes out (by table, since, limit, newest first), the bounds prune on
insert, threads record at once, a file that cannot be written is a counted warning and never an error, and
/history serves it behind the bearer token."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest
from prometheus_client import CollectorRegistry

from tableservice.config import parse_config
from tableservice.errors import HistoryError
from tableservice.metrics import Metrics
from tableservice.service.daemon import Daemon
from tableservice.service.health import HealthState
from tableservice.service.history import (
    ActionHistory,
    ActionOutcome,
    ActionRecord,
    answer_query,
    default_history_path,
    history_path,
    parse_since,
)
from tableservice.service.http import OPEN_PATHS, serve_http, service_routes

TOKEN = "history-token-42"
FAILURES = "tableservice_history_write_failures_total"


def _record(table: str, n: int, ended: float, outcome: ActionOutcome = ActionOutcome.COMPLETED) -> ActionRecord:
    return ActionRecord(
        table=table,
        action="clean" if n % 2 else "compaction",
        instant=_instant(n),
        started=ended - 1.5 - n,
        ended=ended,
        outcome=outcome,
        records_read=10 * n,
        records_written=9 * n,
        bytes_read=1000 * n,
        bytes_written=900 * n,
        files_deleted=n,
        bytes_deleted=123 * n,
        instants_archived=n % 3,
        failed_writes_rolled_back=n % 2,
        error=None if outcome is ActionOutcome.COMPLETED else f"failure number {n}",
    )


def _instant(n: int) -> str:
    return f"2026010100{n:07d}"


def _without_id(records: list[ActionRecord]) -> list[ActionRecord]:
    return [ActionRecord(**{**r.__dict__, "id": None}) for r in records]


def test_records_come_back_by_table_since_and_limit_newest_first(tmp_path: Path) -> None:
    history = ActionHistory(str(tmp_path / "state" / "history.sqlite"))
    now = time.time()
    written = [_record("a" if n % 3 else "b", n, now - 3600 * (20 - n)) for n in range(20)]
    for n, record in enumerate(written):
        if n == 7:
            record = ActionRecord(**{**record.__dict__, "outcome": ActionOutcome.HELD_BACK, "error": "bad plan x"})
            written[n] = record
        assert history.record(record)
    everything = history.query(limit=1000)
    assert _without_id(everything) == written[::-1]
    assert [r.id for r in everything] == list(range(20, 0, -1))
    assert _without_id(history.query(table="b")) == [r for r in written[::-1] if r.table == "b"]
    since = now - 3600 * 5.5
    assert _without_id(history.query(since=since)) == [r for r in written[::-1] if r.ended >= since]
    assert (
        _without_id(history.query(table="a", since=since, limit=2))
        == [r for r in written[::-1] if r.table == "a" and r.ended >= since][:2]
    )
    assert history.query(table="nobody") == []
    held = next(r for r in everything if r.outcome is ActionOutcome.HELD_BACK)
    assert (held.instant, held.error) == (written[7].instant, "bad plan x")
    # The JSON of a record: its fields, ISO times and its duration.
    doc = everything[0].to_json()
    assert doc["outcome"] == "completed" and doc["files_deleted"] == 19 and doc["id"] == 20
    assert datetime.fromisoformat(doc["end"]).timestamp() == pytest.approx(written[-1].ended, abs=1e-3)
    assert doc["duration_seconds"] == pytest.approx(1.5 + 19, abs=1e-3)
    history.close()


def test_pruned_to_max_rows_on_insert(tmp_path: Path) -> None:
    history = ActionHistory(str(tmp_path / "h.sqlite"), max_rows=5)
    now = time.time()
    written = [_record("a", n, now) for n in range(12)]
    for n, record in enumerate(written):
        history.record(record)
        assert len(history.query(limit=100)) == min(n + 1, 5)
    assert _without_id(history.query(limit=100)) == written[:-6:-1]
    with sqlite3.connect(tmp_path / "h.sqlite") as db:  # pruned in the file, not only hidden by the query
        assert db.execute("SELECT count(*) FROM actions").fetchone() == (5,)


def test_pruned_to_max_age_on_insert(tmp_path: Path) -> None:
    now = [time.time()]
    history = ActionHistory(str(tmp_path / "h.sqlite"), max_age_days=2, clock=lambda: now[0])
    start = now[0]
    too_old, day_old, fresh = (_record("a", n, start - days * 86_400) for n, days in ((1, 3), (2, 1), (3, 0)))
    for record in (too_old, day_old, fresh):
        history.record(record)
    assert _without_id(history.query()) == [fresh, day_old]  # `too_old` went at once
    now[0] = start + 1.5 * 86_400  # `day_old` is now 2.5 days old, `fresh` 1.5
    later = _record("a", 4, now[0])
    history.record(later)
    assert _without_id(history.query()) == [later, fresh]


def test_threads_record_at_once(tmp_path: Path) -> None:
    history = ActionHistory(str(tmp_path / "h.sqlite"))
    threads, per_thread = 6, 40
    now = time.time()
    start = threading.Barrier(threads)
    results: list[bool] = []

    def work(t: int) -> None:
        start.wait()
        for n in range(per_thread):
            results.append(history.record(_record(f"table-{t}", n, now)))
            if n % 10 == 0:
                history.query(table=f"table-{t}")

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert results == [True] * threads * per_thread
    rows = history.query(limit=10_000)
    assert sorted(r.id for r in rows if r.id is not None) == list(range(1, threads * per_thread + 1))
    for t in range(threads):
        mine = [r for r in rows if r.table == f"table-{t}"]
        assert sorted(_without_id(mine), key=lambda r: r.instant) == [
            _record(f"table-{t}", n, now) for n in range(per_thread)
        ]
    with sqlite3.connect(tmp_path / "h.sqlite") as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


@pytest.mark.parametrize("damage", ["corrupt", "unwritable"])
def test_a_file_that_cannot_be_written_is_a_counted_warning(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    if damage == "corrupt":
        path = tmp_path / "h.sqlite"
        path.write_bytes(b"this is not an SQLite database\n" * 200)
    else:
        (tmp_path / "a-file").write_text("x")
        path = tmp_path / "a-file" / "h.sqlite"  # its folder cannot be made
    registry = CollectorRegistry()
    history = ActionHistory(str(path), metrics=Metrics(registry))
    with caplog.at_level(logging.WARNING, logger="tableservice.service.history"):
        assert history.record(_record("a", 1, time.time())) is False
        assert history.record(_record("a", 2, time.time())) is False
    assert registry.get_sample_value(FAILURES) == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and str(path) in warnings[0] and _instant(1) in warnings[0]
    # Repaired, the next record opens the file again.
    if damage == "corrupt":
        path.unlink()
    else:
        (tmp_path / "a-file").unlink()
    assert history.record(_record("a", 3, time.time())) is True
    assert [r.instant for r in history.query()] == [_instant(3)]
    assert registry.get_sample_value(FAILURES) == 2


def test_read_only_history(tmp_path: Path) -> None:
    path = str(tmp_path / "h.sqlite")
    with pytest.raises(HistoryError, match="no action history at"):
        ActionHistory(path, read_only=True).query()
    writer = ActionHistory(path)
    writer.record(_record("a", 4, time.time()))
    reader = ActionHistory(path, read_only=True)
    assert _without_id(reader.query()) == _without_id(writer.query())
    assert reader.record(_record("a", 5, time.time())) is False  # a reader never writes
    writer.close()
    reader.close()


def test_parse_since() -> None:
    now = 1_800_000_000.0
    assert parse_since("7d", now) == now - 7 * 86_400
    assert parse_since("12h", now) == now - 12 * 3600
    assert parse_since("30m", now) == now - 1800
    assert parse_since("1.5w", now) == now - 1.5 * 7 * 86_400
    assert parse_since("1700000000", now) == 1_700_000_000.0
    assert parse_since("2026-01-02T03:04:05Z", now) == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert parse_since("2026-01-02T03:04:05", now) == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert parse_since("2026-01-02T05:04:05+02:00", now) == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert parse_since("2026-01-02", now) == datetime(2026, 1, 2, tzinfo=UTC).timestamp()
    for bad in ("yesterday", "7y", "", "-3d"):
        with pytest.raises(ValueError, match="duration such as 7d"):
            parse_since(bad, now)


def test_settings_and_default_path(tmp_path: Path) -> None:
    config = parse_config(
        "service:\n  history: {path: state/h.sqlite, max_rows: 7, max_age_days: 3}\n", base_dir=str(tmp_path)
    )
    settings = config.service.history
    assert history_path(settings) == str(tmp_path / "state" / "h.sqlite")
    store = ActionHistory.from_settings(settings)
    assert store is not None and (store.max_rows, store.max_age_s) == (7, 3 * 86_400)
    assert ActionHistory.from_settings(parse_config("service:\n  history: {enabled: false}\n").service.history) is None
    assert default_history_path({"XDG_STATE_HOME": "/var/state"}) == "/var/state/tableservice/history.sqlite"
    assert parse_config("{}").service.history.path is None


def _get(port: int, target: str, token: str | None = None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{target}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        body = e.read()
        return e.code, (json.loads(body) if e.headers.get("Content-Type") == "application/json" else {})


@pytest.mark.parametrize("token", [TOKEN, None])
def test_history_over_http(tmp_path: Path, token: str | None) -> None:
    history = ActionHistory(str(tmp_path / "h.sqlite"))
    now = time.time()
    written = [_record("a" if n % 2 else "b", n, now - 60 * (10 - n)) for n in range(10)]
    for record in written:
        history.record(record)
    routes = service_routes(
        metrics=Metrics(CollectorRegistry()), health=HealthState(), history=partial(answer_query, history)
    )
    assert "/history" not in OPEN_PATHS
    with anyio.from_thread.start_blocking_portal() as portal:
        future, port = portal.start_task(partial(serve_http, "127.0.0.1", 0, routes, bearer_token=token))
        try:
            if token is not None:
                assert _get(port, "/history")[0] == 401
                assert _get(port, "/history", "wrong-token")[0] == 401
            code, doc = _get(port, "/history?table=a&since=5m&limit=2", token)
            assert code == 200
            expected = [r for r in written[::-1] if r.table == "a" and r.ended >= now - 300][:2]
            assert [a["instant"] for a in doc["actions"]] == [r.instant for r in expected]
            assert doc["actions"] == [r.to_json() for r in history.query(table="a", since=now - 300, limit=2)]
            assert (doc["table"], doc["limit"]) == ("a", 2)
            code, doc = _get(port, "/history", token)
            assert code == 200 and len(doc["actions"]) == 10
            for bad, words in (
                ("since=soon", "duration such as 7d"),
                ("limit=0", "limit=0"),
                ("limit=x", "invalid literal"),
                ("tabel=a", "unknown query parameters tabel"),
                ("table=a&table=b", "more than once: table"),
            ):
                code, doc = _get(port, f"/history?{bad}", token)
                assert code == 400 and words in str(doc["error"]), (bad, doc)
        finally:
            future.cancel()


def test_the_daemon_answers_404_when_its_history_is_off(tmp_path: Path) -> None:
    config = parse_config(f"service:\n  history: {{path: {tmp_path / 'h.sqlite'}}}\n")
    daemon = Daemon(str(tmp_path / "c.yaml"), config, executor=object())  # type: ignore[arg-type]
    assert daemon.history is not None
    daemon.history.record(_record("a", 1, time.time()))
    code, doc = daemon.history_answer("table=a")
    assert code == 200 and [a["instant"] for a in doc["actions"]] == [_instant(1)]  # type: ignore[index]
    off = parse_config("service:\n  history: {enabled: false}\n")
    code, doc = Daemon(str(tmp_path / "c.yaml"), off, executor=object()).history_answer("")  # type: ignore[arg-type]
    assert code == 404 and "service.history.enabled" in str(doc)
