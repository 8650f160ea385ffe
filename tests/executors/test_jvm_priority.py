"""The driver JVM's priority under a local master: every thread of the process goes to the nice value given
(threads started later inherit it), never back; with the shared session, the JVM's threads end up there after
`warm_up` and its Python workers do not."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tableservice.executors.jvm_priority import lower_priority

# A stand-in JVM: three threads; on each line read, one more thread, started by a thread that already existed.
CHILD = """
import sys, threading, time
def park():
    time.sleep(600)
def spawner():
    for _ in sys.stdin:
        threading.Thread(target=park, daemon=True).start()
        print("started", flush=True)
for _ in range(2):
    threading.Thread(target=park, daemon=True).start()
threading.Thread(target=spawner, daemon=True).start()
print("ready", flush=True)
time.sleep(600)
"""


@contextmanager
def child() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def nices(pid: int) -> list[int]:
    return sorted(os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir(f"/proc/{pid}/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_every_thread_of_the_jvm_and_its_later_threads_get_the_nice_value() -> None:
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    with child() as jvm, child() as other:
        assert nices(jvm.pid) == [mine] * 4
        assert lower_priority(jvm.pid, mine + 7) == 4
        assert nices(jvm.pid) == [mine + 7] * 4
        assert nices(other.pid) == [mine] * 4  # another process: untouched
        assert os.getpriority(os.PRIO_PROCESS, 0) == mine  # nor this one
        assert jvm.stdin is not None and jvm.stdout is not None
        jvm.stdin.write("one more\n")
        jvm.stdin.flush()
        assert jvm.stdout.readline() == "started\n"
        assert nices(jvm.pid) == [mine + 7] * 5  # inherited from the thread that started it
        # Never raised back: a lower value asked later leaves the threads as they are.
        assert lower_priority(jvm.pid, mine + 3) == 0
        assert nices(jvm.pid) == [mine + 7] * 5
        assert lower_priority(jvm.pid, mine + 9) == 5
    assert lower_priority(jvm.pid, 10) == 0  # the process is gone: nothing to change, no error


@pytest.mark.spark
def test_after_warm_up_the_local_driver_jvm_yields_to_the_python_workers(spark_executor: Any) -> None:
    spark_executor.warm_up()
    pid = spark_executor.driver_jvm_pid()
    assert pid is not None and b"java" in _cmdline(pid).split(b"\0")[0]
    assert set(nices(pid)) == {spark_executor.settings.local_jvm_nice} == {10}
    # Spark's Python daemon and its workers are the JVM's descendants, started before: the default priority.
    workers = [int(p) for p in os.listdir("/proc") if p.isdigit() and b"pyspark.daemon" in _cmdline(int(p))]
    assert [w for w in workers if _descends_from(w, pid)], "the warm-up started no Python worker"
    assert {n for w in workers if _descends_from(w, pid) for n in nices(w)} == {os.getpriority(os.PRIO_PROCESS, 0)}
    assert spark_executor.session.range(0, 4, 1, 2).count() == 4


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except OSError:
            return False
        if pid == ancestor:
            return True
    return False


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""
