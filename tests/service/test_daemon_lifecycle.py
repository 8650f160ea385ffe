"""The daemon's run state, and the release of locks and Spark on every exit path."""

from __future__ import annotations

import socket
from pathlib import Path

import anyio
import pytest

from tableservice.config import load_config
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
