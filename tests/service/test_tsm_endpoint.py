"""The table-service-manager endpoint on a real server over loopback, called with the URLs Hudi's client builds
(`tests/support/hudi_tsm_client.py`): authentication, parsing, REQUEST, CANCEL (queued, running, unknown),
REGISTER into the state store and DEREGISTER out of it. The daemon's side is a small stand-in here;
`test_tsm_daemon.py` runs the real daemon."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from tableservice.errors import FileMissingError
from tableservice.service.http import OPEN_PATHS, serve_http
from tableservice.service.quotas import GroupCapacity
from tableservice.service.table_state import PassResult
from tableservice.service.table_worker import TableWorker
from tableservice.service.tsm import TableServiceManager
from tableservice.service.tsm_store import Registration, Registrations
from tests.support.hudi_tsm_client import HudiTsmClient, Reply, get

TOKEN = "tsm-T0ken_value.7"
TABLE = "/data/warehouse/trips"
T1, T2, T3 = "20261126010203456", "20261126010204456", "20261126010205456"


@pytest.fixture()
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class _Host:
    """The daemon's side: which tables it serves, which it woke, which exist on storage."""

    served: set[str] = field(default_factory=lambda: {TABLE})  # the configured ones, then the registered ones too
    existing: set[str] = field(default_factory=lambda: {TABLE})
    woken: list[str] = field(default_factory=list)
    refreshes: int = 0
    configured: set[str] = field(init=False)

    def __post_init__(self) -> None:
        self.configured = set(self.served)

    def serve(self, uri: str) -> str | None:
        return uri if uri in self.served else None

    async def refresh(self, registrations: Registrations) -> None:
        self.refreshes += 1
        self.served = self.configured | {r.base_path for r in registrations.all()}

    def check(self, uri: str) -> None:
        if uri not in self.existing:
            raise FileMissingError("no hoodie.properties", path=f"{uri}/.hoodie/hoodie.properties")


@asynccontextmanager
async def endpoint(tmp_path: Path, host: _Host, **options: Any) -> AsyncIterator[tuple[int, TableServiceManager]]:
    store = Registrations(str(tmp_path / "state.sqlite"))
    tsm = TableServiceManager(
        TOKEN,
        store,
        served=host.serve,
        wake=host.woken.append,
        refresh=partial(host.refresh, store),
        check_table=host.check,
        **options,
    )
    async with anyio.create_task_group() as tg:
        serve = partial(
            serve_http, "127.0.0.1", 0, tsm.routes(), bearer_token="status-token", open_paths=OPEN_PATHS | tsm.paths
        )
        port: int = await tg.start(serve)
        try:
            yield port, tsm
        finally:
            tg.cancel_scope.cancel()
            store.close()


def writer(port: int, base_path: str = TABLE, *, token: str | None = TOKEN, **config: str) -> HudiTsmClient:
    uris = f"http://127.0.0.1:{port}" + (f"/?token={token}" if token is not None else "")
    return HudiTsmClient(
        base_path,
        "trips",
        config={"hoodie.table.service.manager.uris": uris, **config},
    )


async def call(client: HudiTsmClient, service: str, action: str, instants: list[str]) -> Reply:
    return await anyio.to_thread.run_sync(client.call, service, action, instants)


def doc(reply: Reply) -> dict[str, Any]:
    value = json.loads(reply.body)
    assert isinstance(value, dict)
    return value


@pytest.mark.anyio
async def test_the_token_comes_as_a_query_parameter_or_a_bearer_header(tmp_path: Path) -> None:
    host = _Host()
    async with endpoint(tmp_path, host) as (port, _):
        missing = await call(writer(port, token=None), "compaction", "REQUEST", [T1])
        wrong = await call(writer(port, token=TOKEN + "x"), "compaction", "REQUEST", [T1])
        status_token = await call(writer(port, token="status-token"), "compaction", "REQUEST", [T1])
        url = writer(port, token=None).url("compaction", "REQUEST", [T2])
        header = await anyio.to_thread.run_sync(partial(get, url, {"Authorization": f"Bearer {TOKEN}"}))
        wrong_header = await anyio.to_thread.run_sync(partial(get, url, {"Authorization": "Bearer nope"}))
        query = await call(writer(port), "compaction", "REQUEST", [T1])
    assert (missing.status, missing.headers["www-authenticate"]) == (401, 'Bearer realm="tableservice"')
    assert missing.body == b"the table-service-manager endpoint needs a token (Bearer header or token=)\n"
    for denied in (wrong, status_token, wrong_header):
        assert (denied.status, denied.body) == (403, b"wrong token for the table-service-manager endpoint\n")
    assert (header.status, doc(header)["queued"]) == (200, [T2])
    assert (query.status, doc(query)["queued"]) == (200, [T1])
    assert host.woken == [TABLE, TABLE]


@pytest.mark.anyio
async def test_request_queues_every_pending_instant_once_and_wakes_the_table(tmp_path: Path) -> None:
    host = _Host()
    async with endpoint(tmp_path, host) as (port, tsm):
        client = writer(port, **{"hoodie.table.service.manager.deploy.username": "etl bot"})
        first = await call(client, "compaction", "REQUEST", [T1, T2])
        again = await call(client, "compaction", "REQUEST", [T1, T2, T3])
        nothing = await call(client, "clean", "REQUEST", [])  # Hudi calls with an empty list too
        cluster = await call(client, "clustering", "REQUEST", [T1])
        queued = tsm.queued()
    assert (first.status, doc(first)) == (
        200,
        {"action": "REQUEST", "base_path": TABLE, "service": "compaction", "queued": [T1, T2], "already_queued": []},
    )
    assert (doc(again)["queued"], doc(again)["already_queued"]) == ([T3], [T1, T2])
    assert (nothing.status, doc(nothing)["queued"]) == (200, [])
    assert (cluster.status, doc(cluster)["service"]) == (200, "clustering")
    assert [(r["service"], r["instant"], r["owner"], r["state"]) for r in queued[TABLE]] == [
        ("compaction", T1, "etl bot", "queued"),
        ("compaction", T2, "etl bot", "queued"),
        ("compaction", T3, "etl bot", "queued"),
        ("clustering", T1, "etl bot", "queued"),
    ]
    assert host.woken == [TABLE, TABLE, TABLE]  # not for the call that queued nothing


@pytest.mark.anyio
async def test_base_paths_are_named_as_the_daemon_names_tables(tmp_path: Path) -> None:
    host = _Host(served={TABLE, "s3://bucket/warehouse/trips"})
    async with endpoint(tmp_path, host) as (port, _):
        file_uri = await call(writer(port, f"file:{TABLE}/"), "compaction", "REQUEST", [T1])
        s3a = await call(writer(port, "s3a://bucket/warehouse/trips"), "compaction", "REQUEST", [T1])
        hdfs = await call(writer(port, "hdfs://nn/warehouse/trips"), "compaction", "REQUEST", [T1])
        relative = await call(writer(port, "warehouse/trips"), "compaction", "REQUEST", [T1])
    assert (file_uri.status, doc(file_uri)["base_path"]) == (200, TABLE)
    assert (s3a.status, doc(s3a)["base_path"]) == (200, "s3://bucket/warehouse/trips")
    assert (hdfs.status, doc(hdfs)["error"]) == (
        400,
        "basepath='hdfs://nn/warehouse/trips': expected an absolute local path or an s3:// URI",
    )
    assert (relative.status, doc(relative)["error"]) == (
        400,
        "basepath='warehouse/trips': expected an absolute local path or an s3:// URI",
    )


@pytest.mark.anyio
async def test_malformed_calls_unknown_tables_and_head_are_refused(tmp_path: Path) -> None:
    host = _Host()
    async with endpoint(tmp_path, host) as (port, _):
        base = f"http://127.0.0.1:{port}/v1/hoodie/service/compact?token={TOKEN}"
        results = {
            name: await anyio.to_thread.run_sync(get, base + query)
            for name, query in {
                "no action": f"&basepath={TABLE}",
                "bad action": f"&action=RUN&basepath={TABLE}",
                "no basepath": "&action=REQUEST",
                "repeated": f"&action=REQUEST&basepath={TABLE}&basepath={TABLE}",
                "bad instant": f"&action=REQUEST&basepath={TABLE}&instant=2026-11-26",
                "cancel nothing": f"&action=CANCEL&basepath={TABLE}&instant=",
            }.items()
        }
        unknown = await call(writer(port, "/data/other"), "compaction", "REQUEST", [T1])
        head = await anyio.to_thread.run_sync(lambda: _head(f"{base}&action=REQUEST&basepath={TABLE}&instant={T1}"))
    assert {name: (r.status, doc(r)["error"]) for name, r in results.items()} == {
        "no action": (400, "action='': expected one of REQUEST, CANCEL, REGISTER, DEREGISTER"),
        "bad action": (400, "action='RUN': expected one of REQUEST, CANCEL, REGISTER, DEREGISTER"),
        "no basepath": (400, "basepath is missing: the table's base path is required"),
        "repeated": (400, "query parameter 'basepath' given more than once"),
        "bad instant": (400, "instant='2026-11-26': expected instant times (yyyyMMddHHmmss[SSS])"),
        "cancel nothing": (400, "CANCEL needs the instants to withdraw (instant=T1,T2)"),
    }
    assert (unknown.status, doc(unknown)["error"]) == (
        404,
        "table /data/other is not served by this daemon: list it in the configuration, let discovery find it, "
        "or REGISTER it first",
    )
    assert head == 405
    assert host.woken == []


def _head(url: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return e.code


class _BlockingWorker:
    """Stands in for a TableWorker whose `run_one` blocks until released."""

    def __init__(self) -> None:
        self.settings = type("S", (), {"uri": TABLE})()
        self.paused = False
        self.label = "trips"
        self.started = threading.Event()
        self.release = threading.Event()
        self.ran: list[tuple[str, str]] = []

    def run_one(self, service: str, instant: str) -> PassResult:
        self.ran.append((service, instant))
        self.started.set()
        assert self.release.wait(30)
        return PassResult()


@pytest.mark.anyio
async def test_cancel_withdraws_queued_requests_and_never_a_running_one(tmp_path: Path) -> None:
    host = _Host()
    worker = _BlockingWorker()
    async with endpoint(tmp_path, host) as (port, tsm):
        client = writer(port)
        await call(client, "compaction", "REQUEST", [T1, T2, T3])
        async with anyio.create_task_group() as tg:
            tg.start_soon(tsm.run_queued, cast(TableWorker, worker), GroupCapacity(1), lambda: False)
            await anyio.to_thread.run_sync(worker.started.wait, 30)
            running = await call(client, "compaction", "CANCEL", [T1])
            withdrawn = await call(client, "compaction", "CANCEL", [T2])
            unknown = await call(client, "compaction", "CANCEL", [T2])
            other_service = await call(client, "clean", "CANCEL", [T3])
            worker.release.set()
        left = tsm.queued()
    assert (running.status, doc(running)["running"], doc(running)["error"]) == (
        409,
        [T1],
        f"compaction {T1} already running: a running action is not cancelled",
    )
    assert (withdrawn.status, doc(withdrawn)["cancelled"]) == (200, [T2])
    assert (unknown.status, doc(unknown)["not_queued"]) == (404, [T2])
    assert (other_service.status, doc(other_service)["error"]) == (404, f"no queued clean request for {T3}")
    assert worker.ran == [("compaction", T1), ("compaction", T3)]  # T2 was withdrawn before its turn
    assert left == {}


@pytest.mark.anyio
async def test_register_stores_the_writer_hints_and_serves_the_table(tmp_path: Path) -> None:
    other = "/data/warehouse/rides"
    host = _Host(existing={TABLE, other})
    settings = {
        "hoodie.table.service.manager.deploy.username": "ingest",
        "hoodie.table.service.manager.deploy.queue": "etl",
        "hoodie.table.service.manager.deploy.resources": "spark:8g,16g",
        "hoodie.table.service.manager.deploy.parallelism": "40",
        "hoodie.table.service.manager.deploy.extra.params": "a=1;b=2",
    }
    async with endpoint(tmp_path, host) as (port, tsm):
        first = await call(writer(port, other, **settings), "compaction", "REGISTER", [])
        before = await call(writer(port, "/data/missing"), "compaction", "REGISTER", [])
        requested = await call(writer(port, other), "compaction", "REQUEST", [T1])
    assert (first.status, doc(first)["new"], doc(first)["served"]) == (200, True, True)
    registration = doc(first)["registration"]
    assert {k: v for k, v in registration.items() if k not in ("registered", "updated")} == {
        "base_path": other,
        "db_name": None,
        "table_name": "trips",
        "owner": "ingest",
        "queue": "etl",
        "resources": "spark:8g,16g",
        "parallelism": 40,
        "extra_params": "a=1;b=2",
        "execution_engine": "spark",
    }
    assert (before.status, doc(before)["error"]) == (
        404,
        "no Hudi table to register at /data/missing: no hoodie.properties",
    )
    assert (requested.status, doc(requested)["queued"]) == (200, [T1])
    assert host.refreshes == 1
    stored = Registrations(str(tmp_path / "state.sqlite"))
    assert [r.to_json() for r in stored.all()] == [registration]
    assert [e.uri for e in tsm.registered_entries()] == [other]


@pytest.mark.anyio
async def test_register_on_request_registers_an_unknown_table_first(tmp_path: Path) -> None:
    other = "/data/warehouse/rides"
    host = _Host(existing={TABLE, other})
    async with endpoint(tmp_path, host, register_on_request=True) as (port, _):
        reply = await call(writer(port, other), "compaction", "REQUEST", [T1])
        missing = await call(writer(port, "/data/missing"), "compaction", "REQUEST", [T1])
    assert (reply.status, doc(reply)["queued"]) == (200, [T1])
    assert host.woken == [other]
    assert missing.status == 404


def test_registering_again_keeps_the_first_time_and_takes_the_new_hints(tmp_path: Path) -> None:
    clock = iter([100.0, 200.0])
    store = Registrations(str(tmp_path / "s.sqlite"), clock=lambda: next(clock))
    first, new = store.register(Registration(TABLE, queue="a", owner="x"))
    second, again = store.register(Registration(TABLE, queue="b", owner="x"))
    store.close()
    reopened = Registrations(str(tmp_path / "s.sqlite")).all()
    assert (new, again) == (True, False)
    assert (first.registered, first.updated, second.registered, second.updated) == (100.0, 100.0, 100.0, 200.0)
    assert reopened == [second]
    assert reopened[0].queue == "b"


@pytest.mark.anyio
async def test_deregister_stops_serving_a_registered_table_and_withdraws_its_queued_requests(tmp_path: Path) -> None:
    other = "/data/warehouse/rides"
    host = _Host(existing={TABLE, other})
    async with endpoint(tmp_path, host) as (port, tsm):
        registered = await call(writer(port, other), "compaction", "REGISTER", [])
        queued = await call(writer(port, other), "compaction", "REQUEST", [T1, T2])
        configured_queued = await call(writer(port), "clustering", "REQUEST", [T3])
        removed = await call(writer(port, other), "compaction", "DEREGISTER", [])
        again = await call(writer(port, other), "compaction", "DEREGISTER", [])
        after = await call(writer(port, other), "compaction", "REQUEST", [T3])
        configured = await call(writer(port), "clean", "DEREGISTER", [])  # served from the configuration only
        # Registered and configured: deregistered, still served, its request kept.
        both = await call(writer(port), "clean", "REGISTER", [])
        deregistered_both = await call(writer(port), "clean", "DEREGISTER", [])
        left = tsm.queued()
        entries = [e.uri for e in tsm.registered_entries()]
    assert (registered.status, queued.status, configured_queued.status) == (200, 200, 200)
    body = doc(removed)
    assert (removed.status, body["action"], body["served"], body["running"]) == (200, "DEREGISTER", False, [])
    assert body["registration"]["base_path"] == other
    assert body["withdrawn"] == [{"service": "compaction", "instant": T1}, {"service": "compaction", "instant": T2}]
    assert (again.status, doc(again)["error"]) == (404, f"table {other} is not registered")
    assert (after.status, doc(after)["error"]) == (
        404,
        f"table {other} is not served by this daemon: list it in the configuration, let discovery find it, or "
        "REGISTER it first",
    )
    assert (configured.status, doc(configured)["error"]) == (404, f"table {TABLE} is not registered")
    assert both.status == 200
    assert (deregistered_both.status, doc(deregistered_both)["served"], doc(deregistered_both)["withdrawn"]) == (
        200,
        True,
        [],
    )
    assert list(left) == [TABLE]  # the configured table's request stays
    assert [r["instant"] for r in left[TABLE]] == [T3]
    assert entries == []
    assert host.refreshes == 4
    assert Registrations(str(tmp_path / "state.sqlite")).all() == []


def test_deregister_in_the_store_removes_one_table_and_reports_a_missing_one(tmp_path: Path) -> None:
    store = Registrations(str(tmp_path / "s.sqlite"))
    kept, _ = store.register(Registration(TABLE, owner="x"))
    gone, _ = store.register(Registration("/data/warehouse/rides", queue="etl"))
    removed = store.deregister("/data/warehouse/rides")
    missing = store.deregister("/data/warehouse/rides")
    store.close()
    assert (removed, missing) == (gone, None)
    assert Registrations(str(tmp_path / "s.sqlite")).all() == [kept]
