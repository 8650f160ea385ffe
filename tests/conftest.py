from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from tableservice.storage import Storage, StorageOptions
from tests.support.servers import MotoServer, moto_server, spark_connect_server

# Shared machines are slow and noisy: no per-example deadline; CI runs a fixed, derandomised set of examples.
settings.register_profile("default", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "default")


def pytest_configure(config: pytest.Config) -> None:
    """Spark's Python workers inherit the environment of the JVM, which starts with the first test that uses
    Spark (the shared session, or a command run in-process): the test moto server's credentials and loopback
    must be in place before any of them."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", MotoServer.access_key_id)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", MotoServer.secret_access_key)
    # Daemons the tests start keep their action history under the state folder: a fresh one for the run, never
    # the user's (subprocesses inherit it).
    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="tableservice-test-state-")


def pytest_unconfigure(config: pytest.Config) -> None:
    state = os.environ.get("XDG_STATE_HOME", "")
    if os.path.basename(state).startswith("tableservice-test-state-"):
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    with moto_server() as server:
        yield server


@pytest.fixture()
def s3_bucket(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> tuple[Storage, str]:
    """A fresh bucket on the moto server and a Storage configured for it; returns (storage, s3://bucket)."""
    import boto3

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto.secret_access_key)
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=moto.endpoint_url, region_name=moto.region)
    client.create_bucket(Bucket=bucket)
    options = StorageOptions(
        endpoint_url=moto.endpoint_url,
        region=moto.region,
        access_key_id=moto.access_key_id,
        secret_access_key=moto.secret_access_key,
    )
    return Storage(options), f"s3://{bucket}"


@pytest.fixture()
def unanswered_port() -> Iterator[int]:
    """A loopback port bound and never listening for the whole test: connections are refused, and no other
    process can take it meanwhile."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


@pytest.fixture(scope="session")
def spark_executor() -> Iterator[object]:
    """The one local SparkSession of the test run (local[2], UI off). Its Python workers take S3 credentials from
    the environment they start with, as a deployment's executors do (tasks never carry credentials): the test
    moto server's, set for the whole run by `pytest_configure` (whichever test starts Spark first)."""
    from tableservice.executors.spark import SparkExecutor, SparkSettings

    executor = SparkExecutor(
        SparkSettings(master="local[2]", conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"})
    )
    executor.start()
    yield executor
    executor.stop()


@pytest.fixture(scope="session")
def spark_connect_url() -> Iterator[str]:
    """A local Spark Connect server for the run (started on first use)."""
    with spark_connect_server() as url:
        yield url


@pytest.fixture(scope="session")
def zk_tools() -> None:
    """Debian's ZooKeeper, Curator and a JDK: skip with the reason outside CI, fail in CI."""
    from tests.support.zk.server import unavailable

    reason = unavailable()
    if reason is not None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"ZooKeeper tests cannot run in CI: {reason}")
        print(f"skipping ZooKeeper tests: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def zk_server(zk_tools: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real standalone ZooKeeper on 127.0.0.1 for the run."""
    from tests.support.zk.server import ZooKeeperServer

    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """`once` and `run` configure the root logger for the process (handlers bound to the stderr of that moment):
    give each test the logging set-up it started with."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)
