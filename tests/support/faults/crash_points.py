"""Crash points for kill -9 trials: storage writes counted across the processes of one trial (see
`hook/sitecustomize.py`), the process group killed at a chosen one."""

from __future__ import annotations

import fcntl
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

COUNTER = "TABLESERVICE_FAULT_COUNTER"
KILL_AT = "TABLESERVICE_FAULT_KILL_AT"
KILL_MODE = "TABLESERVICE_FAULT_KILL_MODE"
KILL_DELAY_MS = "TABLESERVICE_FAULT_KILL_DELAY_MS"
ZK_PID = "TABLESERVICE_FAULT_ZK_PID"  # mode `zk`: the ZooKeeper server's pid
ZK_SIGNAL = "TABLESERVICE_FAULT_ZK_SIGNAL"  # mode `zk`: KILL (the server stops) or STOP (it hangs)
ZK_MODE = "zk"
GROUP = "TABLESERVICE_FAULT_GROUP"  # the pass's process group, set by its first process for those it starts
COUNTED = ("write_bytes", "create_if_absent", "open_output_stream", "delete", "delete_dir", "rename")


def next_number(path: str) -> int:
    """Increment the counter file under an exclusive lock; returns the new value."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.pread(fd, 32, 0)
        value = int(raw or b"0") + 1
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(value).encode(), 0)
        return value
    finally:
        os.close(fd)


def read_count(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return int(f.read() or b"0")
    except FileNotFoundError:
        return 0


def kill_group() -> None:
    """SIGKILL the pass's process group (Spark's Python workers run in a group of their own: theirs too)."""
    group = int(os.environ.get(GROUP, "0") or 0)
    if group and group != os.getpgrp():
        os.killpg(group, signal.SIGKILL)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def signal_zookeeper(counter: str, number: int) -> None:
    """Mode `zk`: SIGKILL or SIGSTOP to the ZooKeeper server; `<counter>.zk` records the write it happened at."""
    name = os.environ.get(ZK_SIGNAL, "KILL")
    os.kill(int(os.environ[ZK_PID]), signal.SIGSTOP if name == "STOP" else signal.SIGKILL)
    with open(counter + ".zk", "w") as marker:
        marker.write(f"{number} {name}\n")


def _torn_write(location: str, data: bytes) -> None:
    """What `Storage.write_bytes` leaves on local disk when it dies between writing its temp file and renaming it."""
    if "://" in location and not location.startswith("file:"):
        return
    folder = os.path.dirname(os.path.abspath(location.removeprefix("file:")))
    os.makedirs(folder, exist_ok=True)
    fd, _ = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def install() -> None:
    """Patch `tableservice.storage.Storage` in this process according to the environment."""
    from tableservice.storage import fs

    counter = os.environ[COUNTER]
    os.environ.setdefault(GROUP, str(os.getpgrp()))  # inherited by the JVM and the workers it starts
    kill_at = int(os.environ.get(KILL_AT, "0") or 0)
    mode = os.environ.get(KILL_MODE, "before")
    delay = int(os.environ.get(KILL_DELAY_MS, "0") or 0) / 1000

    def wrap(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            number = next_number(counter)
            with open(counter + ".trace", "a") as trace:
                trace.write(f"{number} {os.getpid()} {time.time():.3f} {name} {args[0] if args else ''}\n")
            if number != kill_at:
                return real(self, *args, **kwargs)
            if mode == ZK_MODE:
                signal_zookeeper(counter, number)
                return real(self, *args, **kwargs)  # the pass goes on without its ZooKeeper server
            if mode == "torn" and name in ("write_bytes", "create_if_absent"):
                _torn_write(args[0], args[1])
                kill_group()
            if mode == "after":
                timer = threading.Timer(delay, kill_group)
                timer.daemon = True
                timer.start()
                out = real(self, *args, **kwargs)
                if delay == 0:
                    time.sleep(1)  # the timer fires
                return out
            kill_group()
            return None  # never reached

        counted.__name__ = name
        return counted

    for name in COUNTED:
        setattr(fs.Storage, name, wrap(name, getattr(fs.Storage, name)))
