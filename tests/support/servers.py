"""Real servers for tests, started on loopback and stopped afterwards."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Return once something listens on `port`; ServerExited as soon as `proc` (the server meant to) has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServerExited(f"the server for 127.0.0.1:{port} exited with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


class ServerExited(RuntimeError):
    """A test server exited before it listened (its port may have been taken after `free_port` chose it)."""


@dataclass(frozen=True)
class MotoServer:
    endpoint_url: str
    region: str = "us-east-1"
    access_key_id: str = "testing"
    secret_access_key: str = "testing"


@contextmanager
def moto_server(extra_env: dict[str, str] | None = None) -> Iterator[MotoServer]:
    """moto in server mode on 127.0.0.1 (S3 and DynamoDB share one endpoint), each request atomic (see
    `moto_serial.py`). `extra_env`: moto's settings (`INITIAL_NO_AUTH_ACTION_COUNT`: requests are authenticated,
    their signatures checked, after that many)."""
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", **(extra_env or {}))
    launcher = str(Path(__file__).with_name("moto_serial.py"))
    for attempt in range(3):  # another process may bind the chosen port before the server does: choose again
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, launcher, "127.0.0.1", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        try:
            wait_for_port(port, proc=proc)
            break
        except ServerExited:
            if attempt == 2:
                raise
        except BaseException:
            proc.kill()
            raise
    try:
        yield MotoServer(endpoint_url=f"http://127.0.0.1:{port}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def spark_connect_server(python: str | None = None) -> Iterator[str]:
    """A local Spark Connect server (local[2]) on 127.0.0.1; yields its sc:// URL."""
    import pyspark

    spark_home = Path(pyspark.__file__).resolve().parent
    port = free_port()
    env = dict(
        os.environ, SPARK_HOME=str(spark_home), PYSPARK_PYTHON=python or sys.executable, SPARK_LOCAL_IP="127.0.0.1"
    )
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"spark-connect-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                str(spark_home / "bin" / "spark-submit"),
                "--class",
                "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--master",
                "local[2]",
                "--conf",
                f"spark.connect.grpc.binding.port={port}",
                "--conf",
                "spark.connect.grpc.binding.address=127.0.0.1",
                "--conf",
                "spark.ui.enabled=false",
                "--conf",
                "spark.sql.shuffle.partitions=2",
                "spark-internal",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        wait_for_port(port, timeout=180)
        yield f"sc://127.0.0.1:{port}"
    finally:
        import signal

        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def descendants(pid: int) -> set[tuple[int, str]]:
    """(pid, command name) of every living descendant of `pid`, from /proc (Linux)."""
    parents: dict[int, list[tuple[int, str]]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        parents.setdefault(ppid, []).append((int(entry.name), comm))
    out: set[tuple[int, str]] = set()
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.add(child)
            todo.append(child[0])
    return out


def run_watching_children(args: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, str, set[str]]:
    """Run a command to its end; returns its exit code, stdout, stderr and the names of every process it started
    (seen by polling /proc every 50 ms while it ran)."""
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=err, text=True)
        seen: set[str] = set()
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise AssertionError(f"{args[:4]} did not finish within {timeout:.0f}s")
            seen |= {name for _, name in descendants(proc.pid)}
            time.sleep(0.05)
        out.seek(0)
        err.seek(0)
        return proc.returncode, out.read(), err.read(), seen
