"""`tableservice history` asks the running daemon's /history (with its bearer token) or, with `--offline`, reads the
history file itself; both give the same actions."""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path

import anyio
import anyio.from_thread
import pytest
from prometheus_client import CollectorRegistry

from tableservice.cli import main
from tableservice.metrics import Metrics
from tableservice.service.health import HealthState
from tableservice.service.history import ActionHistory, ActionOutcome, ActionRecord, answer_query
from tableservice.service.http import serve_http, service_routes

TOKEN = "history-cli-token"


def _history(path: Path) -> list[ActionRecord]:
    """A history of two tables: completed cleans and compactions, and one failed compaction."""
    store = ActionHistory(str(path))
    now = time.time()
    records = []
    for n in range(6):
        failed = n == 4
        records.append(
            ActionRecord(
                table="alpha" if n % 2 == 0 else "beta",
                action="compaction" if n % 3 else "clean",
                instant=f"202601010000{n:05d}",
                started=now - 3600 * (6 - n) - 30,
                ended=now - 3600 * (6 - n),
                outcome=ActionOutcome.FAILED if failed else ActionOutcome.COMPLETED,
                records_read=100 * n,
                records_written=0 if failed else 100 * n,
                bytes_read=4096 * n,
                bytes_written=0 if failed else 4000 * n,
                files_deleted=0 if n % 3 else n + 1,
                bytes_deleted=0 if n % 3 else 777 * (n + 1),
                error="SparkJobError: executor lost (injected)" if failed else None,
            )
        )
    for record in records:
        store.record(record)
    store.close()
    return records


def _config(tmp_path: Path, port: int, history: Path) -> Path:
    (tmp_path / "token").write_text(TOKEN + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"service:\n  http: {{host: 127.0.0.1, port: {port}, status_token_file: {tmp_path / 'token'}}}\n"
        f"  history: {{path: {history}}}\n"
    )
    return cfg


def test_history_asks_the_daemon_and_reads_the_file_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "state" / "history.sqlite"
    records = _history(path)
    served = ActionHistory(str(path))
    routes = service_routes(
        metrics=Metrics(CollectorRegistry()), health=HealthState(), history=partial(answer_query, served)
    )
    with anyio.from_thread.start_blocking_portal() as portal:
        future, port = portal.start_task(partial(serve_http, "127.0.0.1", 0, routes, bearer_token=TOKEN))
        try:
            cfg = _config(tmp_path, port, path)
            assert main(["history", "--config", str(cfg), "--json"]) == 0
            online = json.loads(capsys.readouterr().out)
            assert [a["instant"] for a in online["actions"]] == [r.instant for r in reversed(records)]
            assert online["actions"] == [r.to_json() for r in served.query()]
            args = ["history", "--config", str(cfg), "--table", "alpha", "--since", "4h", "--json"]
            assert main(args) == 0
            alpha = json.loads(capsys.readouterr().out)["actions"]
            expected = [r for r in reversed(records) if r.table == "alpha" and r.ended >= time.time() - 4 * 3600]
            assert [a["instant"] for a in alpha] == [r.instant for r in expected] and expected
            assert main([*args[:-1], "--limit", "1", "--json"]) == 0
            assert json.loads(capsys.readouterr().out)["actions"] == alpha[:1]
            assert main(["history", "--config", str(cfg), "--table", "beta"]) == 0
            text = capsys.readouterr().out.splitlines()
            assert len(text) == 3 and all(" beta " in line for line in text)
            assert main(["history", "--config", str(cfg), "--table", "alpha"]) == 0
            out = capsys.readouterr().out
            failed = records[4]
            assert f"alpha  compaction {failed.instant}  failed  30.0s" in out
            assert "  SparkJobError: executor lost (injected)" in out
            assert f"clean {records[0].instant}  completed  30.0s; {records[0].files_deleted} files deleted" in out
            # The same from the file, without the daemon.
            assert main(["history", "--config", str(cfg), "--offline", "--json"]) == 0
            assert json.loads(capsys.readouterr().out)["actions"] == online["actions"]
            # The daemon refuses without the token.
            (tmp_path / "token").write_text("another-token\n")
            assert main(["history", "--config", str(cfg)]) == 2
            assert "answered /history with HTTP 401" in capsys.readouterr().err
        finally:
            future.cancel()
            served.close()


def test_history_says_what_to_do_without_a_daemon_or_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], unanswered_port: int
) -> None:
    port = unanswered_port
    path = tmp_path / "history.sqlite"
    cfg = _config(tmp_path, port, path)
    assert main(["history", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"does not answer at http://127.0.0.1:{port}" in err and "--offline` reads its history file" in err
    assert main(["history", "--config", str(cfg), "--offline"]) == 1
    assert f"no action history at {path}" in capsys.readouterr().err
    assert main(["history", "--config", str(cfg), "--since", "last tuesday"]) == 2
    assert "duration such as 7d" in capsys.readouterr().err
    _history(path)
    assert main(["history", "--config", str(cfg), "--offline", "--table", "gamma"]) == 0
    assert capsys.readouterr().out == "no actions recorded for gamma\n"
