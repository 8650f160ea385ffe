"""Spark beyond one machine: a real standalone cluster (a master and two workers, separate JVMs started with
pyspark's `bin/spark-class`, on 127.0.0.1) runs the daemon's compaction and clustering jobs. Tasks ran on both
workers' executors (Spark's own event log says so), and hudi-rs reads the same rows before and after.

The daemon runs in a child process (`tableservice once`): this test run's shared SparkSession is local, and a
process holds one SparkContext."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyspark
import pytest

from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table
from tests.support.oracle import assert_same_rows, hudi_read

pytestmark = [pytest.mark.spark, pytest.mark.oracle, pytest.mark.slow]
SPARK_HOME = Path(pyspark.__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _alive_workers(ui_port: int) -> int:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as r:
            state = json.load(r)
    except OSError:
        return 0
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[str]:
    """`spark://127.0.0.1:PORT` of a master with two one-core workers; stopped afterwards."""
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    port, ui = _free_port(), _free_port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    procs = [
        subprocess.Popen(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                *("--host", "127.0.0.1", "--port", str(port)),
                *("--webui-port", str(ui)),
            ],
            env=env,
            stdout=(tmp_path / "master.log").open("w"),
            stderr=subprocess.STDOUT,
        )
    ]
    try:
        _wait_for(lambda: _port_open(port), "the Spark master")
        for i in (1, 2):
            work = tmp_path / f"worker{i}"
            procs.append(
                subprocess.Popen(
                    [
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        *("--host", "127.0.0.1", "--cores", "1"),
                        *("--memory", "1g", "--webui-port", "0", "--work-dir", str(work), f"spark://127.0.0.1:{port}"),
                    ],
                    env=env,
                    stdout=(tmp_path / f"worker{i}.log").open("w"),
                    stderr=subprocess.STDOUT,
                )
            )
        _wait_for(lambda: _alive_workers(ui) == 2, "two Spark workers")
        yield f"spark://127.0.0.1:{port}"
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_the_daemon_compacts_and_clusters_on_a_standalone_cluster(tmp_path: Path, standalone_cluster: str) -> None:
    path = mor_table(tmp_path / "t", records=400, commits=4, max_file_records=50)
    before = hudi_read(path)
    events = tmp_path / "events"
    events.mkdir()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"""service:
  http: {{host: 127.0.0.1, port: 0}}
spark:
  master: "{standalone_cluster}"
  conf:
    spark.executor.cores: "1"
    spark.executor.memory: "512m"
    spark.cores.max: "2"
    spark.scheduler.minRegisteredResourcesRatio: "1.0"
    spark.scheduler.maxRegisteredResourcesWaitingTime: "120s"
    spark.eventLog.enabled: "true"
    spark.eventLog.compress: "false"
    spark.eventLog.dir: "file://{events}"
    spark.pyspark.python: "{sys.executable}"
    spark.driver.host: "127.0.0.1"
    spark.sql.shuffle.partitions: "2"
defaults:
  compaction:
    hoodie.compact.inline.max.delta.commits: 2
  clustering:
    schedule: true
    hoodie.clustering.async.max.commits: 1
    hoodie.clustering.plan.strategy.sort.columns: fare
tables:
  - uri: {path}
""")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "tableservice"), "once", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = HudiTable.open(Storage(), path)
    completed = list(table.timeline().completed())
    assert any(i.action is Action.COMPACTION for i in completed), completed
    replaces = [i for i in completed if i.action in (Action.CLUSTERING, Action.REPLACE_COMMIT)]
    assert replaces and all(table.is_clustering(i) for i in replaces), completed
    assert_same_rows(hudi_read(path).drop_columns(["_hoodie_file_name"]), before.drop_columns(["_hoodie_file_name"]))
    executors: set[str] = set()
    for log in events.rglob("events_*"):  # event log v2: a folder per application, events in events_<n>_<app>
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event.get("Event") == "SparkListenerTaskEnd":
                executors.add(event["Task Info"]["Executor ID"])
    assert len(executors - {"driver"}) == 2, executors
