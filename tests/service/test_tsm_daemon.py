"""The real daemon serving the table-service-manager endpoint to a writer that calls it as Hudi's client does: the
writer registers its table, schedules a compaction plan and requests it; the daemon, whose next poll is a
minute away, compacts at once. The registration survives a restart."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from tableservice.config import load_config
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.locks import InProcessLockProvider
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.actions import TableContext
from tableservice.service.compaction import schedule_compaction
from tableservice.service.daemon import Daemon, RunState
from tableservice.service.history import ActionOutcome
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table
from tests.support.hudi_tsm_client import HudiTsmClient, Reply

TOKEN = "writer-handoff-token"
# Completed well before the poll a minute away would have started it (0.7-1.9 s measured; a busy CI machine is slower).
WARM_COMPLETION_S = 30.0


def _config(tmp_path: Path) -> Path:
    token_file = tmp_path / "tsm-token"
    token_file.write_text(TOKEN + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"""\
service:
  poll_interval_seconds: 60
  shutdown_grace_seconds: 60
  http: {{host: 127.0.0.1, port: 0}}
  history: {{path: {tmp_path / "state.sqlite"}}}
  table_service_manager: {{enabled: true, token_file: {token_file}}}
spark:
  master: "local[2]"
tables: []
"""
    )
    return cfg


def _completed(path: str, instant: str) -> bool:
    timeline = HudiTable.open(Storage(), path).reload()
    return any(i.requested_time == instant and i.action is Action.COMPACTION for i in timeline.completed())


async def _until(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        await anyio.sleep(0.02)
    return check()


@dataclass
class _HandOver:
    """One writer's hand-over, measured from the moment it called (wall clock)."""

    plan: str
    reply: Reply
    answered_s: float  # the endpoint's answer
    started_s: float  # the compaction's start (the daemon's action history)
    completed_s: float  # its completed instant on the timeline


async def _hand_over(daemon: Daemon, client: HudiTsmClient, path: str) -> _HandOver:
    """The writer schedules a compaction plan (under its own lock) and hands it to the daemon, as Hudi's
    `delegateToTableServiceManager` does: every pending compaction instant in one REQUEST."""
    table = HudiTable.open(Storage(), path)
    ctx = TableContext(table=table, lock=InProcessLockProvider().table_lock(table.name, path), executor=daemon.executor)
    plan = await anyio.to_thread.run_sync(lambda: schedule_compaction(ctx, CompactionPolicy(), force=True))
    assert plan is not None
    pending = [i.requested_time for i in table.reload().pending_of(Action.COMPACTION).instants]
    called = time.time()
    reply = await anyio.to_thread.run_sync(client.call, "compaction", "REQUEST", pending)
    answered = time.time() - called
    assert await _until(lambda: _completed(path, plan.requested_time), 60), "the requested compaction did not complete"
    completed = time.time() - called
    history = daemon.history
    assert history is not None

    def runs() -> list[Any]:
        return [
            r for r in history.query(table=table.name) if (r.action, r.instant) == ("compaction", plan.requested_time)
        ]

    assert await _until(lambda: bool(runs()), 10)  # recorded once the action returned
    assert [r.outcome for r in runs()] == [ActionOutcome.COMPLETED]
    return _HandOver(plan.requested_time, reply, answered, runs()[0].started - called, completed)


@pytest.mark.spark
def test_writers_hand_their_compactions_to_the_daemon_and_they_run_at_once(tmp_path: Path, spark_executor: Any) -> None:
    paths = [
        mor_table(tmp_path / name, records=60, commits=2, max_file_records=100, name=name)
        for name in ("trips", "rides")
    ]
    same_name = mor_table(tmp_path / "elsewhere" / "trips", records=20, commits=1, name="trips")
    cfg = _config(tmp_path)
    seen: dict[str, Any] = {}

    async def first_run() -> None:
        daemon = Daemon(str(cfg), load_config(str(cfg)), executor=spark_executor)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            assert await _until(lambda: daemon.http_port is not None and daemon._spark_up, 120)
            clients = [
                HudiTsmClient(
                    f"file:{path}",  # Hudi's metaClient.getBasePath() of a local table
                    name,
                    config={
                        "hoodie.table.service.manager.uris": f"http://127.0.0.1:{daemon.http_port}?token={TOKEN}",
                        "hoodie.table.service.manager.deploy.username": "ingest",
                        "hoodie.table.service.manager.deploy.queue": "etl",
                    },
                )
                for path, name in zip(paths, ("trips", "rides"), strict=True)
            ]
            call = clients[0].call
            seen["not_served"] = await anyio.to_thread.run_sync(call, "compaction", "REQUEST", ["20261126000000000"])
            seen["registered"] = [await anyio.to_thread.run_sync(c.call, "compaction", "REGISTER", []) for c in clients]
            assert await _until(lambda: len(daemon.tables) == 2 and _idle(daemon), 60)
            # Another writer's table named `trips` too: registered, not served, and the daemon goes on.
            clash = HudiTsmClient(same_name, "trips", config=clients[0].config)
            seen["clash"] = await anyio.to_thread.run_sync(clash.call, "compaction", "REGISTER", [])
            # The first compaction of the session pays for Spark's first jobs; the second shows the hand-over.
            seen["hand_overs"] = [await _hand_over(daemon, c, p) for c, p in zip(clients, paths, strict=True)]
            # A request leaves the list when its pass ends, a moment after the action is recorded: /status is read
            # once nothing is listed (10 s at most; the assertion below fails if a request stays).
            await _until(lambda: not daemon.status()["requested"], 10)
            seen["status"] = daemon.status()
            daemon.request_stop()

    anyio.run(first_run)
    for h in seen["hand_overs"]:
        print(
            f"REQUEST answered in {h.answered_s * 1000:.1f} ms; compaction started {h.started_s * 1000:.0f} ms and "
            f"completed {h.completed_s:.2f} s after the call"
        )
    not_served: Reply = seen["not_served"]
    assert (not_served.status, json.loads(not_served.body)["error"]) == (
        404,
        f"table {paths[0]} is not served by this daemon: list it in the configuration, let discovery find it, or "
        "REGISTER it first",
    )
    registered = [json.loads(r.body) for r in seen["registered"]]
    assert [(r["new"], r["served"], r["registration"]["base_path"]) for r in registered] == [
        (True, True, paths[0]),
        (True, True, paths[1]),
    ]
    assert {(r["registration"]["owner"], r["registration"]["queue"]) for r in registered} == {("ingest", "etl")}
    for h in seen["hand_overs"]:
        assert (h.reply.status, json.loads(h.reply.body)["queued"]) == (200, [h.plan])
        # The next poll was a minute away: only the request started the compaction.
        assert h.started_s < 1.0, f"compaction {h.plan} started {h.started_s:.2f} s after its request"
    clash = json.loads(seen["clash"].body)
    assert (seen["clash"].status, clash["new"], clash["served"], clash["error"]) == (
        409,
        True,
        False,
        f"table {same_name} is registered but not served: another served table has its name, or its lock cannot "
        "be set up (the daemon's log says which)",
    )
    warm = seen["hand_overs"][1]
    assert warm.completed_s < WARM_COMPLETION_S, f"compaction completed {warm.completed_s:.2f} s after its request"
    assert sorted(t["name"] for t in seen["status"]["tables"]) == ["rides", "trips"]
    assert seen["status"]["requested"] == {}

    # A restart serves the registered tables from the start: nothing is registered again. DEREGISTER then stops
    # serving one of them, and a third start does not serve it.
    served_at_start: list[str] = []
    after: dict[str, Any] = {}

    async def second_run() -> None:
        daemon = Daemon(str(cfg), load_config(str(cfg)), executor=spark_executor)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            assert await _until(lambda: len(daemon.tables) == 2 and daemon.http_port is not None, 60)
            served_at_start.extend(daemon.tables)
            client = HudiTsmClient(
                f"file:{paths[1]}",
                "rides",
                config={"hoodie.table.service.manager.uris": f"http://127.0.0.1:{daemon.http_port}?token={TOKEN}"},
            )
            after["deregistered"] = await anyio.to_thread.run_sync(client.call, "compaction", "DEREGISTER", [])
            after["served"] = sorted(daemon.tables)
            after["request"] = await anyio.to_thread.run_sync(client.call, "compaction", "REQUEST", [])
            daemon.request_stop()

    async def third_run() -> None:
        daemon = Daemon(str(cfg), load_config(str(cfg)), executor=spark_executor)
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            # RUNNING once the start has set up every table it serves (a second one would be among them)
            assert await _until(lambda: daemon.state is RunState.RUNNING, 60)
            after["served_third"] = sorted(daemon.tables)
            daemon.request_stop()

    anyio.run(second_run)
    anyio.run(third_run)
    assert sorted(served_at_start) == sorted(paths)
    removed = json.loads(after["deregistered"].body)
    assert (after["deregistered"].status, removed["served"], removed["registration"]["base_path"]) == (
        200,
        False,
        paths[1],
    )
    assert after["served"] == [paths[0]]
    assert after["request"].status == 404
    assert after["served_third"] == [paths[0]]


def _idle(daemon: Daemon) -> bool:
    """The table's first pass is over (its status was polled and nothing runs)."""
    task = next(iter(daemon.tables.values()))
    return task.worker.status.last_poll is not None and not len(daemon.running)
