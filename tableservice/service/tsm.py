"""The table-service-manager endpoint: Hudi writers hand the plans they schedule to the daemon.

A Hudi writer with `hoodie.table.service.manager.enabled=true` (and the action listed in `.actions`) only
schedules a compaction, clustering or clean plan and then calls (Hudi's `HoodieTableServiceManagerClient`):

    GET <uri>/v1/hoodie/service/compact|cluster|clean?action=REQUEST&basepath=...&instant=T1,T2&db_name=...
        &table_name=...&username=...&queue=...&resource=...&parallelism=...&extra_params=...&execution_engine=...

`instant` lists every pending instant of that service, comma-separated (empty when there is none). Only the status
counts for Hudi: any answer but 2xx makes its client retry and then fail the writer's call. The same paths take
`action=REGISTER` (the table is served from then on, persisted in the state store with the owner, queue and
resource hints: `service/tsm_store.py`) and `action=CANCEL` (queued requests of the named instants are withdrawn;
one already running is not). `action=DEREGISTER` is the daemon's own (Hudi's client has no such action; operators
call it, e.g. for a dropped table): the registration is removed and the daemon stops serving the table, its queued
requests withdrawn (one already running finishes), unless its configuration or discovery names it.

REQUEST queues each instant for its table and wakes the table's worker at once (no poll interval in between);
the worker executes the queued instants before its usual pass, each under its executor lease as every action is
(another replica holding the lease runs it; nothing runs twice), ahead of any polled work for a slot of
`max_concurrent_actions`. A request for a table the daemon does not serve is answered 404 unless
`register_on_request` registers it first.

Authentication: Hudi's client sends a bare GET (no header can be configured), but it keeps a query string given
in `hoodie.table.service.manager.uris`: `http://daemon:9464/?token=...` makes every call carry `token=...`. The
endpoint takes the token from `Authorization: Bearer <token>` or from the `token` query parameter, compared in
constant time: 401 without one, 403 with a wrong one. The token is never logged here (Hudi's client logs the
URLs it calls at INFO; see the README).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import re
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from tableservice.config import TableEntry
from tableservice.errors import LeaseHeldError, TableServiceError
from tableservice.service.health import one_line
from tableservice.service.http_wire import Request, Response
from tableservice.service.quotas import GroupCapacity
from tableservice.service.table_worker import TableWorker
from tableservice.service.tsm_store import Registration, Registrations
from tableservice.storage import to_uri

__all__ = ["BASE_PATH", "SERVICES", "QueuedRequest", "TableServiceManager"]

log = logging.getLogger(__name__)

BASE_PATH = "/v1/hoodie/service"
SERVICES = {f"{BASE_PATH}/compact": "compaction", f"{BASE_PATH}/cluster": "clustering", f"{BASE_PATH}/clean": "clean"}
"""Hudi's request paths and the daemon's service each one names."""

ACTIONS = ("REQUEST", "CANCEL", "REGISTER", "DEREGISTER")
_INSTANT = re.compile(r"\d{14}(\d{3})?")
# capacity priority: below every (start-by moment, oldest pending) key, so requested work goes before polled work
_REQUEST_FIRST = (-math.inf, "")
_MAX_FIELDS = 32


@dataclass
class QueuedRequest:
    """One instant a writer asked the daemon to execute."""

    service: str
    instant: str
    requested_at: float
    owner: str | None = None
    running: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "instant": self.instant,
            "requested_at": self.requested_at,
            "owner": self.owner,
            "state": "running" if self.running else "queued",
        }


@dataclass
class _Call:
    """One parsed call: its parameters, each given once."""

    action: str
    service: str
    params: dict[str, str]
    base_path: str = ""
    instants: list[str] = field(default_factory=list)


class _BadCall(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class TableServiceManager:
    """The endpoint's state: the queued requests per table, the registrations, and the routes.

    The daemon supplies `served(uri)` (the URI of a table it serves, or None), `wake(uri)` (start the table's next
    pass now), `refresh()` (serve newly registered tables) and `check_table(uri)` (blocking: raises when no Hudi
    table is there).
    """

    def __init__(
        self,
        token: str,
        store: Registrations,
        *,
        served: Callable[[str], str | None],
        wake: Callable[[str], None],
        refresh: Callable[[], Awaitable[None]],
        check_table: Callable[[str], None],
        register_on_request: bool = False,
    ) -> None:
        if not token:
            raise ValueError("the table-service-manager endpoint needs a token")
        self._digest = hashlib.sha256(token.encode("latin-1")).digest()
        self.store = store
        self._served = served
        self._wake = wake
        self._refresh = refresh
        self._check_table = check_table
        self.register_on_request = register_on_request
        self._queues: dict[str, list[QueuedRequest]] = {}
        self._known: list[Registration] = []

    # --- the daemon's side -----------------------------------------------------------------------------

    @property
    def paths(self) -> frozenset[str]:
        return frozenset(SERVICES)

    def routes(self) -> dict[str, Callable[[Request], Awaitable[Response]]]:
        return dict.fromkeys(SERVICES, self.handle)

    def registered_entries(self) -> list[TableEntry]:
        """The registered tables as configuration entries (default policies and locks). Blocking (reads the store);
        when the store cannot be read, the registrations read last time (so a hiccup stops serving nothing)."""
        try:
            self._known = self.store.all()
        except TableServiceError as e:
            log.error("table-service-manager registrations: %s; serving the ones read before", e)
        return [TableEntry.model_validate({"uri": r.base_path}) for r in self._known]

    def queued(self) -> dict[str, list[dict[str, Any]]]:
        """/status: the requests per table URI."""
        return {uri: [r.to_json() for r in queue] for uri, queue in self._queues.items() if queue}

    def has_queued(self, worker: TableWorker) -> bool:
        """Whether requests of the table wait to be run (its task must wake for them; a paused table's wait)."""
        return not worker.paused and any(not r.running for r in self._queues.get(worker.settings.uri, ()))

    async def run_queued(
        self, worker: TableWorker, capacity: GroupCapacity, stopping: Callable[[], bool], group: str | None = None
    ) -> None:
        """Execute the table's queued requests, oldest first, each as an operator's `run` does (under its executor
        lease; a lease held elsewhere means another replica runs it) and ahead of polled work for a slot. A paused
        table keeps its requests queued until it is resumed."""
        uri = worker.settings.uri
        while not stopping() and not worker.paused:
            request = next((r for r in self._queues.get(uri, []) if not r.running), None)
            if request is None:
                return
            request.running = True
            started = time.monotonic()
            try:
                async with capacity.slot(_REQUEST_FIRST, group):
                    if stopping():
                        request.running = False
                        return
                    result = await anyio.to_thread.run_sync(worker.run_one, request.service, request.instant)
            except LeaseHeldError:
                log.info(
                    "requested %s runs on another replica (it holds the executor lease)",
                    request.service,
                    extra={"table": worker.label, "instant": request.instant},
                )
            except TableServiceError as e:
                log.error("requested %s failed: %s", request.service, e, extra={"table": worker.label})
            except Exception:  # a bug must not end the table's task; the pass that follows retries as usual
                log.exception("requested %s failed", request.service, extra={"table": worker.label})
            else:
                if result.failed:
                    outcome = f"failed: {result.failed[0].error}"
                elif result.completed or result.clustered or result.cleaned:
                    outcome = "finished"
                else:
                    outcome = "not run: the instant is not pending (completed or removed elsewhere)"
                log.info(
                    "requested %s %s (%.2fs)",
                    request.service,
                    outcome,
                    time.monotonic() - started,
                    extra={"table": worker.label, "instant": request.instant},
                )
            finally:
                queue = self._queues.get(uri, [])
                if request in queue:
                    queue.remove(request)

    # --- the endpoint --------------------------------------------------------------------------------------

    async def handle(self, request: Request) -> Response:
        denied = self._authenticate(request)
        if denied is not None:
            return denied
        if request.method != "GET":  # every action changes state: HEAD must not run one
            return Response.text(405, f"method not allowed: {request.method}", headers=(("Allow", "GET"),))
        try:
            call = _parse(request)
            if call.action == "REGISTER":
                return await self._register(call)
            if call.action == "DEREGISTER":
                return await self._deregister(call)
            uri = self._served(call.base_path)
            if uri is None and call.action == "REQUEST" and self.register_on_request:
                registered = await self._register(call)
                if registered.status != 200:
                    return registered
                uri = self._served(call.base_path)
            if uri is None:
                raise _BadCall(
                    404,
                    f"table {call.base_path} is not served by this daemon: list it in the configuration, let "
                    "discovery find it, or REGISTER it first",
                )
            return self._request(call, uri) if call.action == "REQUEST" else self._cancel(call, uri)
        except _BadCall as e:
            return Response.json(e.status, {"error": str(e)})

    def _authenticate(self, request: Request) -> Response | None:
        header = request.headers.get("authorization")
        given: str | None = None
        if header is not None:
            scheme, _, credentials = header.strip().partition(" ")
            given = credentials.strip() if scheme.lower() == "bearer" else ""
        else:
            tokens = [v for k, v in urllib.parse.parse_qsl(request.query, keep_blank_values=True) if k == "token"]
            given = tokens[0] if len(tokens) == 1 else ("" if tokens else None)
        if given is None:
            challenge = ("WWW-Authenticate", 'Bearer realm="tableservice"')
            return Response.text(
                401, "the table-service-manager endpoint needs a token (Bearer header or token=)", headers=(challenge,)
            )
        digest = hashlib.sha256(given.encode("utf-8", "surrogateescape")).digest()
        if not hmac.compare_digest(digest, self._digest):
            return Response.text(403, "wrong token for the table-service-manager endpoint")
        return None

    def _request(self, call: _Call, uri: str) -> Response:
        queue = self._queues.setdefault(uri, [])
        waiting = {(r.service, r.instant) for r in queue}
        queued, already = [], []
        now = time.time()
        for instant in call.instants:
            if (call.service, instant) in waiting:
                already.append(instant)
                continue
            queue.append(QueuedRequest(call.service, instant, now, call.params.get("username") or None))
            waiting.add((call.service, instant))
            queued.append(instant)
        if queued:
            self._wake(uri)
            log.info(
                "%s requested for %s by %s",
                call.service,
                ", ".join(queued),
                call.params.get("username") or "an unnamed user",
                extra={"table": uri},
            )
        return Response.json(
            200,
            {
                "action": "REQUEST",
                "base_path": uri,
                "service": call.service,
                "queued": queued,
                "already_queued": already,
            },
        )

    def _cancel(self, call: _Call, uri: str) -> Response:
        queue = self._queues.get(uri, [])
        cancelled, running, unknown = [], [], []
        for instant in call.instants:
            match = next((r for r in queue if (r.service, r.instant) == (call.service, instant)), None)
            if match is None:
                unknown.append(instant)
            elif match.running:
                running.append(instant)
            else:
                queue.remove(match)
                cancelled.append(instant)
        doc = {
            "action": "CANCEL",
            "base_path": uri,
            "service": call.service,
            "cancelled": cancelled,
            "running": running,
            "not_queued": unknown,
        }
        if cancelled:
            log.info("%s request withdrawn for %s", call.service, ", ".join(cancelled), extra={"table": uri})
            return Response.json(200, doc)
        if running:
            doc["error"] = f"{call.service} {', '.join(running)} already running: a running action is not cancelled"
            return Response.json(409, doc)
        doc["error"] = f"no queued {call.service} request for {', '.join(unknown) or 'the instants given'}"
        return Response.json(404, doc)

    async def _register(self, call: _Call) -> Response:
        params = call.params
        try:
            await anyio.to_thread.run_sync(self._check_table, call.base_path)
        except TableServiceError as e:
            raise _BadCall(404, f"no Hudi table to register at {call.base_path}: {e.problem}") from e
        parallelism = params.get("parallelism") or None
        registration = Registration(
            base_path=call.base_path,
            db_name=params.get("db_name") or None,
            table_name=params.get("table_name") or None,
            owner=params.get("username") or None,
            queue=params.get("queue") or None,
            resources=params.get("resource") or None,
            parallelism=int(parallelism) if parallelism and parallelism.isdigit() else None,
            extra_params=params.get("extra_params") or None,
            execution_engine=params.get("execution_engine") or None,
        )
        try:
            stored, new = await anyio.to_thread.run_sync(self.store.register, registration)
        except TableServiceError as e:
            raise _BadCall(503, str(e)) from e
        self._known = [r for r in self._known if r.base_path != stored.base_path] + [stored]
        await self._refresh()
        log.info(
            "table %s registered by %s",
            "newly" if new else "again",
            stored.owner or "an unnamed user",
            extra={"table": stored.base_path},
        )
        served = self._served(stored.base_path) is not None
        doc: dict[str, Any] = {"action": "REGISTER", "new": new, "served": served, "registration": stored.to_json()}
        if served:
            return Response.json(200, doc)
        doc["error"] = (
            f"table {stored.base_path} is registered but not served: another served table has its name, or its "
            "lock cannot be set up (the daemon's log says which)"
        )
        return Response.json(409, doc)

    async def _deregister(self, call: _Call) -> Response:
        uri = self._served(call.base_path) or call.base_path
        try:
            removed = await anyio.to_thread.run_sync(self.store.deregister, call.base_path)
        except TableServiceError as e:
            raise _BadCall(503, str(e)) from e
        if removed is None:
            raise _BadCall(404, f"table {call.base_path} is not registered")
        self._known = [r for r in self._known if r.base_path != removed.base_path]
        await self._refresh()
        served = self._served(call.base_path) is not None
        queue = self._queues.get(uri, [])
        # A table no longer served has no worker to run its queued requests: they are withdrawn.
        withdrawn = [] if served else [r for r in queue if not r.running]
        for r in withdrawn:
            queue.remove(r)
        log.info(
            "table deregistered%s; %d queued requests withdrawn",
            " (still served: the configuration or discovery names it)" if served else "",
            len(withdrawn),
            extra={"table": removed.base_path},
        )
        return Response.json(
            200,
            {
                "action": "DEREGISTER",
                "registration": removed.to_json(),
                "withdrawn": [{"service": r.service, "instant": r.instant} for r in withdrawn],
                "running": [{"service": r.service, "instant": r.instant} for r in queue if r.running],
                "served": served,
            },
        )


def _parse(request: Request) -> _Call:
    """The call in `request`: 400 for a query string that is malformed, repeats a parameter, lacks `action` or
    `basepath`, names another action, or names an instant that is not an instant time."""
    service = SERVICES[request.path]
    try:
        pairs = urllib.parse.parse_qsl(
            request.query, keep_blank_values=True, strict_parsing=False, max_num_fields=_MAX_FIELDS
        )
    except ValueError as e:
        raise _BadCall(400, f"malformed query string: {e}") from e
    params: dict[str, str] = {}
    for key, value in pairs:
        if key in params:
            raise _BadCall(400, f"query parameter {key!r} given more than once")
        params[key] = value
    params.pop("token", None)
    action = params.get("action", "").strip().upper()
    if action not in ACTIONS:
        raise _BadCall(400, f"action={one_line(params.get('action', ''))!r}: expected one of {', '.join(ACTIONS)}")
    base_path = _base_path(params.get("basepath", ""))
    instants = [t.strip() for t in params.get("instant", "").split(",") if t.strip()]
    bad = [t for t in instants if not _INSTANT.fullmatch(t)]
    if bad:
        raise _BadCall(400, f"instant={one_line(', '.join(bad))!r}: expected instant times (yyyyMMddHHmmss[SSS])")
    if action == "CANCEL" and not instants:
        raise _BadCall(400, "CANCEL needs the instants to withdraw (instant=T1,T2)")
    return _Call(action, service, params, base_path, instants)


def _base_path(value: str) -> str:
    """`basepath` as the daemon names tables: `s3://bucket/prefix` (from s3/s3a/s3n) or an absolute local path
    (from `file:` URIs too), without a trailing `/`."""
    text = value.strip()
    if not text:
        raise _BadCall(400, "basepath is missing: the table's base path is required")
    try:
        entry = TableEntry.model_validate({"uri": text})
    except ValueError as e:
        raise _BadCall(400, f"basepath={one_line(text)!r}: expected an absolute local path or an s3:// URI") from e
    if not (to_uri(text).startswith("/") or entry.uri.startswith("s3://")):
        raise _BadCall(400, f"basepath={one_line(text)!r}: expected an absolute local path or an s3:// URI")
    return entry.uri
