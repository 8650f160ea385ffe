"""Object-store requests counted in process (`tableservice.storage.requests`) against the requests the S3 server
received (the counting proxy in front of moto): an idle poll is one timeline listing, and an action's counts match
the server's kind for kind."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tableservice.config.cost import REQUEST_KINDS
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.locks import InProcessLockProvider
from tableservice.metrics import new_metrics
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.actions import TableContext
from tableservice.service.compaction import schedule_compaction
from tableservice.service.history import ActionHistory
from tableservice.service.protocol import ServiceSettings
from tableservice.service.table_state import TableSettings
from tableservice.service.table_worker import TableWorker
from tableservice.storage import Storage, StorageOptions
from tableservice.storage.requests import RequestKind, count, counting
from tests.support.faults.s3_proxy import FaultProxy
from tests.support.servers import moto_server
from tests.support.trip_tables import create_trip_table


@pytest.fixture(scope="module")
def s3() -> Iterator[tuple[FaultProxy, Storage]]:
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    try:
        with moto_server() as moto, FaultProxy(moto.endpoint_url) as proxy:
            boto3.client("s3", endpoint_url=moto.endpoint_url, region_name="us-east-1").create_bucket(Bucket="counts")
            yield proxy, Storage(StorageOptions(endpoint_url=proxy.endpoint_url, region="us-east-1"))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _mor_table(storage: Storage, uri: str, version: int, commits: int) -> str:
    create_trip_table(uri, version, TableType.MERGE_ON_READ, name=uri.rsplit("/", 1)[-1], storage=storage)
    client = WriteClient(storage, uri, options=WriteOptions(max_file_records=40))
    for step in Workload(80, commits, 0.3, 0.0, partitions=2, seed=5).steps():
        client.apply(step)
    return uri


def _metric(metrics_text: str, table: str) -> dict[str, float]:
    pattern = rf'^tableservice_storage_requests_total\{{kind="(\w+)",table="{table}"\}} ([0-9.e+]+)$'
    return {k: float(v) for k, v in re.findall(pattern, metrics_text, re.M)}


@pytest.mark.parametrize("version", [6, 9])
def test_an_idle_poll_is_one_timeline_listing_and_nothing_else(s3: tuple[FaultProxy, Storage], version: int) -> None:
    proxy, storage = s3
    uri = _mor_table(storage, f"s3://counts/idle{version}", version, commits=2)
    metrics = new_metrics(process_metrics=False)
    worker = TableWorker(TableSettings(uri=uri, name=f"idle{version}"), storage, InProcessLockProvider(), None, metrics)  # type: ignore[arg-type]
    worker.poll()  # the first poll opens the table: hoodie.properties, the archive once
    worker.needs_pass()
    before = _metric(metrics.render()[0].decode(), f"idle{version}")
    proxy.reset_seen()
    for _ in range(3):
        worker.poll()
        worker.needs_pass()
    seen = proxy.seen()
    timeline = "idle6/.hoodie/" if version == 6 else f"idle{version}/.hoodie/timeline/"
    assert [(r.kind, r.key) for r in seen] == [("LIST", timeline)] * 3
    after = _metric(metrics.render()[0].decode(), f"idle{version}")
    assert after["LIST"] - before.get("LIST", 0.0) == 3.0
    assert {k: after[k] - before.get(k, 0.0) for k in after if k != "LIST"} == {k: 0.0 for k in after if k != "LIST"}


def test_in_process_counts_of_an_action_match_the_server(s3: tuple[FaultProxy, Storage]) -> None:
    proxy, storage = s3
    uri = _mor_table(storage, "s3://counts/action", 9, commits=4)
    table = HudiTable.open(storage, uri)
    ctx = TableContext(table=table, lock=InProcessLockProvider().table_lock(table.name, uri), executor=None)  # type: ignore[arg-type]
    proxy.reset_seen()
    with counting() as tally:
        scheduled = schedule_compaction(ctx, CompactionPolicy(), force=True)
    assert scheduled is not None
    server = Counter(r.kind for r in proxy.seen())
    assert tally.counts() == dict(server)
    assert server["PUT"] >= 1 and server["LIST"] >= 1  # the plan written, the timeline listed
    assert server["HEAD"] == 0  # sizes come from listings


@pytest.mark.spark
def test_a_compaction_records_every_request_the_server_saw(
    s3: tuple[FaultProxy, Storage], spark_executor: Any, tmp_path: Path
) -> None:
    """The history record (the cost ledger's source) of a compaction run on Spark holds the requests the S3 server
    received while it ran, kind for kind: the daemon's own (plan, checks, commit) and those of the Spark tasks,
    which run in other processes and report theirs. No input file is looked up by a HEAD (sizes come from the
    listing the plan was checked against)."""
    proxy, storage = s3
    uri = _mor_table(storage, "s3://counts/ledger", 9, commits=3)
    table = HudiTable.open(storage, uri)
    ctx = TableContext(table=table, lock=InProcessLockProvider().table_lock(table.name, uri), executor=spark_executor)
    planned = schedule_compaction(ctx, CompactionPolicy(), force=True)
    assert planned is not None
    history = ActionHistory(str(tmp_path / "history.sqlite"))
    options = StorageOptions(endpoint_url=proxy.endpoint_url, region="us-east-1")  # the tasks' way to S3
    worker = TableWorker(
        TableSettings(uri=uri, name="ledger"),
        storage,
        InProcessLockProvider(),
        spark_executor,
        new_metrics(process_metrics=False),
        options,
        history=history,
    )
    proxy.reset_seen()
    result = worker.run_one("compaction", planned.requested_time)
    assert not result.failed and len(result.completed) == 1
    (record,) = [r for r in history.query() if r.action == "compaction"]
    window = [r for r in proxy.seen() if record.started <= r.at <= record.ended]
    server = Counter(r.kind.lower() for r in window)
    recorded = {kind: getattr(record, f"requests_{kind}") for kind in REQUEST_KINDS}
    assert recorded == {kind: server.get(kind, 0) for kind in REQUEST_KINDS}
    # The tasks' share is in it: the new base files' PUTs and the GETs of the log files they merged.
    written = [r for r in window if r.kind == "PUT" and r.key.endswith(".parquet") and planned.requested_time in r.key]
    merged = [r for r in window if r.kind == "GET" and ".log." in r.key]
    assert written and merged
    # HEADs only where a state transition checks that the instant's previous state is still there
    heads = [r.key for r in window if r.kind == "HEAD"]
    assert heads == [
        f"ledger/.hoodie/timeline/{planned.requested_time}.compaction.{s}" for s in ("requested", "inflight")
    ]


def test_an_isolated_scope_keeps_its_requests_from_the_enclosing_ones() -> None:
    """A Spark task's scope is isolated: when the task runs in the daemon's own process, the daemon's scope does
    not count its requests as well (the task reports them, the worker adds them once)."""
    with counting() as outer:
        count(RequestKind.LIST)
        with counting(isolated=True) as task:
            count(RequestKind.GET, 3)
            with counting() as inner:
                count(RequestKind.PUT)
        count(RequestKind.HEAD)
    assert task.counts() == {"GET": 3, "PUT": 1}
    assert inner.counts() == {"PUT": 1}
    assert outer.counts() == {"LIST": 1, "HEAD": 1}


def test_a_clean_records_the_requests_the_server_saw(s3: tuple[FaultProxy, Storage], tmp_path: Path) -> None:
    """An action run in the daemon's own process (a clean): its history record holds what the server received while
    it ran, its deletes among them."""
    proxy, storage = s3
    uri = "s3://counts/cleaned"
    create_trip_table(uri, 9, TableType.COPY_ON_WRITE, name="cleaned", storage=storage)
    client = WriteClient(storage, uri, options=WriteOptions(max_file_records=40))
    for step in Workload(80, 3, 0.5, 0.0, partitions=2, seed=9).steps():
        client.apply(step)
    history = ActionHistory(str(tmp_path / "history.sqlite"))
    settings = TableSettings(
        uri=uri, name="cleaned", clean=ServiceSettings(CleanPolicy.model_validate({"commits_retained": 1}))
    )
    no_spark: Any = None  # a clean runs in the daemon's process
    worker = TableWorker(settings, storage, InProcessLockProvider(), no_spark, None, history=history)
    planned = worker.service("clean").schedule(worker.context())
    assert planned is not None
    proxy.reset_seen()
    result = worker.run_one("clean", planned.requested_time)
    assert not result.failed and result.cleaned == [planned.requested_time]
    (record,) = [r for r in history.query() if r.action == "clean"]
    window = [r for r in proxy.seen() if record.started <= r.at <= record.ended]
    server = Counter(r.kind.lower() for r in window)
    assert {kind: getattr(record, f"requests_{kind}") for kind in REQUEST_KINDS} == {
        kind: server.get(kind, 0) for kind in REQUEST_KINDS
    }
    deleted = {r.key for r in window if r.kind == "DELETE" and r.key.endswith(".parquet")}
    assert deleted and record.files_deleted == len(deleted)
