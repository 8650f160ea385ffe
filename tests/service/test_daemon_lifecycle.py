"""The daemon's run state, and the release of locks and Spark on every exit path."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest

from tableservice.config import load_config
from tableservice.errors import ConfigError
from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.service.daemon import Daemon, RunState
from tests.support.daemon_helpers import config_text


def test_an_exit_through_an_error_still_releases_locks_and_spark(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = tmp_path / "c.yaml"
        cfg.write_text(config_text([]).replace("port: 0", f"port: {port}"))
        daemon = Daemon(str(cfg), load_config(str(cfg)))  # owns its (not yet started) Spark executor
        released: list[str] = []
        close, stop = daemon.locks.close, daemon.executor.stop

        def close_locks() -> None:
            released.append("locks")
            close()

        def stop_spark() -> None:
            released.append("spark")
            stop()

        daemon.locks.close = close_locks  # type: ignore[method-assign]
        daemon.executor.stop = stop_spark  # type: ignore[method-assign]
        started: RunState = daemon.state
        assert started is RunState.STARTING and not daemon.stopping
        with pytest.raises(BaseException) as err:  # the port is taken: serving HTTP fails
            anyio.run(daemon.run)
    assert "address already in use" in str(err.value).lower() or isinstance(err.value, BaseExceptionGroup)
    assert released == ["locks", "spark"]
    ended: RunState = daemon.state
    assert ended is RunState.STOPPED and daemon.stopping
    assert daemon.status()["state"] == "stopped"
    assert "tableservice_up 0.0" in daemon.metrics.render()[0].decode()


class _NoSpark(SparkExecutor):
    """Never starts Spark: enough for a daemon without tables."""

    def start(self) -> Any:
        return None

    def warm_up(self) -> None:
        pass

    def stop(self) -> None:
        pass


def _fetch(url: str, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


def test_status_needs_the_token_read_from_its_file_and_probes_do_not(tmp_path: Path) -> None:
    token_file = tmp_path / "status-token"
    token_file.write_text("d43m0n-token\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text([]).replace("port: 0}", f"port: 0, status_token_file: '{token_file}'}}"))
    daemon = Daemon(str(cfg), load_config(str(cfg)), executor=_NoSpark(SparkSettings()))
    bearer = {"Authorization": "Bearer d43m0n-token"}
    requests = {
        "status": ("/status", {}),
        "status with token": ("/status", bearer),
        "status with another token": ("/status", {"Authorization": "Bearer d43m0n-token2"}),
        "healthz": ("/healthz", {}),
        "readyz": ("/readyz", {}),
        "metrics": ("/metrics", {}),
    }
    replies: dict[str, tuple[int, bytes]] = {}

    async def scenario() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            with anyio.fail_after(30):
                while daemon.state is not RunState.RUNNING:
                    await anyio.sleep(0.05)
            for name, (path, headers) in requests.items():
                url = f"http://127.0.0.1:{daemon.http_port}{path}"
                replies[name] = await anyio.to_thread.run_sync(_fetch, url, headers)
            daemon.request_stop()

    anyio.run(scenario)
    assert {name: status for name, (status, _) in replies.items()} == {
        "status": 401,
        "status with token": 200,
        "status with another token": 401,
        "healthz": 200,
        "readyz": 200,
        "metrics": 200,
    }
    assert json.loads(replies["status with token"][1])["state"] == "running"
    assert daemon.http_stats.accepted == len(requests)
    assert daemon.http_stats.shed == 0


def test_an_unreadable_status_token_file_stops_the_start(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-token"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text([]).replace("port: 0}", f"port: 0, status_token_file: '{missing}'}}"))
    daemon = Daemon(str(cfg), load_config(str(cfg)), executor=_NoSpark(SparkSettings()))
    with pytest.raises(ConfigError) as refused:
        anyio.run(daemon.run)
    assert str(refused.value).startswith(
        f"service.http.status_token_file: cannot read the bearer token from {missing}: [Errno 2]"
    )
    assert daemon.http_port is None
