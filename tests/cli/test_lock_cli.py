"""`tableservice lock status|acquire` with the in-process lock (the drill commands on the embedded default)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tableservice.cli import main
from tableservice.locks import InProcessLockProvider
from tests.support.daemon_helpers import config_text, mor_table


def test_lock_acquire_holds_and_status_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = mor_table(tmp_path / "t", records=50, commits=1)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text([path]))
    assert main(["lock", "status", "--config", str(cfg), "--table", "table0"]) == 0
    assert "lock is free" in capsys.readouterr().out
    holder = threading.Thread(
        target=main, args=(["lock", "acquire", "--config", str(cfg), "--table", "t", "--hold", "4"],)
    )
    holder.start()
    lock = InProcessLockProvider().table_lock("t", path)
    deadline = time.monotonic() + 10
    while lock.holder() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert main(["lock", "status", "--config", str(cfg), "--table", "t"]) == 0
    assert "held by pid-" in capsys.readouterr().out
    started = time.monotonic()
    handle = lock.acquire(10)  # waits for the drill to release
    waited = time.monotonic() - started
    lock.release(handle)
    holder.join()
    assert waited > 0.5
    assert "released" in capsys.readouterr().out


def test_unknown_table_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = mor_table(tmp_path / "t", records=50, commits=1)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text([path]))
    assert main(["lock", "status", "--config", str(cfg), "--table", "nope"]) == 2
    assert "--table 'nope'" in capsys.readouterr().err
