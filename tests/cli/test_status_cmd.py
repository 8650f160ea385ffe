"""`tableservice status` asks the running daemon (/status, with its bearer token) and exits 1 when a table is not
healthy; it says what to do when the daemon does not answer."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import anyio
import anyio.from_thread
import pytest
from prometheus_client import CollectorRegistry

from tableservice.cli import main
from tableservice.errors import DamagedInputError
from tableservice.locks import InProcessLockProvider
from tableservice.metrics import Metrics
from tableservice.service.health import HealthState
from tableservice.service.http import serve_http, service_routes
from tableservice.service.table_state import TableSettings
from tableservice.service.table_worker import TableWorker
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table

TOKEN = "status-token-123"


def _document(tmp_path: Path) -> dict[str, object]:
    """The /status of a daemon serving two tables, one of them with compaction quarantined after damaged input."""
    healthy = TableWorker(
        TableSettings(uri=mor_table(tmp_path / "a", records=40, commits=1, name="a"), name="alpha"),
        Storage(),
        InProcessLockProvider(),
        executor=object(),  # type: ignore[arg-type]
    )
    damaged = TableWorker(
        TableSettings(uri=mor_table(tmp_path / "b", records=40, commits=1, name="b"), name="beta"),
        Storage(),
        InProcessLockProvider(),
        executor=object(),  # type: ignore[arg-type]
    )
    for worker in (healthy, damaged):
        worker.poll()
    error = DamagedInputError("log file x.log.1 holds 10 bytes", instant_time="20260101000000000", table="beta")
    damaged._hold("compaction", "20260102000000000", error)
    damaged.status.update(health="degraded", health_reason="compaction quarantined: " + str(error))
    healthy.status.update(health="ok")
    return {
        "version": "test",
        "state": "running",
        "spark_up": True,
        "running_actions": 0,
        "tables": [healthy.status.to_json(), damaged.status.to_json()],
    }


def _config(tmp_path: Path, port: int) -> Path:
    (tmp_path / "token").write_text(TOKEN + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"service:\n  http: {{host: 127.0.0.1, port: {port}, status_token_file: {tmp_path / 'token'}}}\n"
        f"tables:\n  - uri: {tmp_path / 'a'}\n"
    )
    return cfg


def test_status_asks_the_daemon_and_fails_on_an_unhealthy_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = _document(tmp_path)
    routes = service_routes(metrics=Metrics(CollectorRegistry()), health=HealthState(), status=lambda: document)
    with anyio.from_thread.start_blocking_portal() as portal:
        future, port = portal.start_task(partial(serve_http, "127.0.0.1", 0, routes, bearer_token=TOKEN))
        try:
            cfg = _config(tmp_path, port)
            assert main(["status", "--config", str(cfg), "--json"]) == 1
            assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(document, default=str))
            assert main(["status", "--config", str(cfg)]) == 1
            captured = capsys.readouterr()
            assert "beta (" in captured.out and "compaction quarantined until" in captured.out
            assert "x.log.1 holds 10 bytes" in captured.out
            assert "1 of 2 tables not healthy: beta" in captured.err
            document["tables"] = document["tables"][:1]  # type: ignore[index]
            assert main(["status", "--config", str(cfg)]) == 0
            capsys.readouterr()
        finally:
            future.cancel()


def test_status_says_what_to_do_when_the_daemon_does_not_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], unanswered_port: int
) -> None:
    port = unanswered_port
    cfg = _config(tmp_path, port)
    mor_table(tmp_path / "a", records=40, commits=1, name="a")
    assert main(["status", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"does not answer at http://127.0.0.1:{port}" in err and "--offline" in err
    assert main(["status", "--config", str(cfg), "--offline", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["tables"]
    assert row["health"] == "ok" and row["table_version"] == 9
