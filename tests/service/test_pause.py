"""A table paused with `tableservice pause` is polled but runs no action (its pending compaction stays pending),
/status says `paused` with the reason and `tableservice_table_paused` is 1; `tableservice resume` edits the file,
the running daemon reloads it and the compaction runs."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest

from tableservice.cli import main
from tableservice.config import load_config
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.service.daemon import Daemon
from tableservice.storage import Storage
from tests.support.daemon_helpers import config_text, with_pending_compaction

pytestmark = pytest.mark.spark


def _get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
        body: bytes = reply.read()
        return body


def _paused_metric(text: str) -> float:
    (value,) = [
        line.split()[-1] for line in text.splitlines() if line.startswith('tableservice_table_paused{table="table0"}')
    ]
    return float(value)


def test_paused_table_is_polled_but_runs_nothing_until_resumed(tmp_path: Path, spark_executor: Any) -> None:
    path, _, scheduled = with_pending_compaction(tmp_path / "t", spark_executor, records=100, commits=2)
    t = scheduled.requested_time
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text([path], max_delta_commits=50, poll=0.2))
    assert main(["pause", "--config", str(cfg), "--table", "table0", "--reason", "backfill until 18:00"]) == 0
    daemon = Daemon(str(cfg), load_config(str(cfg)), executor=spark_executor)
    seen: dict[str, Any] = {}

    def completed() -> bool:
        return HudiTable.open(Storage(), path).timeline().is_completed(t)

    async def scenario() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            deadline = time.monotonic() + 60
            polls: list[float] = []
            while time.monotonic() < deadline and len(set(polls)) < 5:  # five polls while paused
                await anyio.sleep(0.2)
                tables = daemon.status()["tables"]
                if tables and tables[0]["last_poll"] is not None:
                    polls.append(tables[0]["last_poll"])
            port = daemon.http_port
            assert port is not None
            seen["status"] = json.loads(await anyio.to_thread.run_sync(_get, port, "/status"))
            seen["metrics"] = (await anyio.to_thread.run_sync(_get, port, "/metrics")).decode()
            seen["pending_while_paused"] = not completed()
            assert main(["resume", "--config", str(cfg), "--table", "table0"]) == 0
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not completed():
                await anyio.sleep(0.3)
            seen["resumed_status"] = daemon.status()["tables"][0]
            seen["resumed_metrics"] = daemon.metrics.render()[0].decode()
            daemon.request_stop()

    anyio.run(scenario)
    (table,) = seen["status"]["tables"]
    assert (table["name"], table["paused"], table["paused_reason"]) == ("table0", True, "backfill until 18:00")
    assert table["health"] == "ok"
    assert [(p["action"], p["instant"]) for p in table["pending"]] == [("compaction", t)]
    assert _paused_metric(seen["metrics"]) == 1.0
    assert seen["pending_while_paused"]
    assert completed(), "the compaction ran once the table was resumed"
    assert (seen["resumed_status"]["paused"], seen["resumed_status"]["paused_reason"]) == (False, None)
    assert _paused_metric(seen["resumed_metrics"]) == 0.0
