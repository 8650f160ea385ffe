"""The cost ledger: each action's history record carries its cost and what it bought (compared with the plan, the
files on storage and the commit it wrote), the ledger sums them per table and service with prices, older history
files gain the new columns, and /report and `tableservice report` print it."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from prometheus_client import CollectorRegistry

from tableservice.cli import main
from tableservice.config import CostSettings
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.locks import InProcessLockProvider
from tableservice.metrics import Metrics
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.history import ActionHistory, ActionOutcome, ActionRecord
from tableservice.service.ledger import answer_report, ledger
from tableservice.service.protocol import ServiceSettings
from tableservice.service.table_worker import TableSettings, TableWorker
from tableservice.storage import Storage
from tests.support.daemon_helpers import with_pending_compaction

PRICES = CostSettings(executor_hour=0.36, per_1000_requests={"get": 0.4, "put": 5.0, "list": 5.0})


def _record(table: str, action: str, ended: float, **values: Any) -> ActionRecord:
    outcome = values.pop("outcome", ActionOutcome.COMPLETED)
    return ActionRecord(table, action, "20260101000000000", ended - 10, ended, outcome, **values)


def test_ledger_sums_prices_and_read_amplification(tmp_path: Path) -> None:
    history = ActionHistory(str(tmp_path / "h.sqlite"))
    now = time.time()
    rows = [
        _record("a", "compaction", now - 60, executor_seconds=1800.0, spark_seconds=40.0, requests_get=2000,
                requests_put=10, file_groups_before=4, file_groups_after=4, files_before=14, files_after=4,
                log_files_removed=10, log_bytes_removed=5000, bytes_read=9000),
        _record("a", "compaction", now - 30, executor_seconds=1800.0, requests_list=1000, file_groups_before=2,
                file_groups_after=2, files_before=4, files_after=2, log_files_removed=2, log_bytes_removed=100),
        _record("a", "compaction", now - 20, outcome=ActionOutcome.FAILED, error="boom"),
        _record("a", "clean", now - 10, files_deleted=7, bytes_deleted=700, requests_delete=7),
        _record("b", "clustering", now - 5, executor_seconds=360.0, file_groups_before=10, file_groups_after=2,
                files_before=10, files_after=2),
        _record("b", "clustering", now - 9 * 86400),  # outside a 7-day window
    ]  # fmt: skip
    for r in rows:
        assert history.record(r)
    code, doc = answer_report(history, "since=7d", PRICES)
    assert code == 200 and doc["priced"] is True
    by_table = {t["table"]: t for t in doc["tables"]}
    comp = by_table["a"]["services"]["compaction"]
    assert (comp["actions"], comp["completed"], comp["failed"]) == (3, 2, 1)
    assert comp["executor_seconds"] == 3600.0 and comp["executor_hours"] == 1.0
    assert comp["requests"] == {"get": 2000, "put": 10, "list": 1000, "head": 0, "post": 0, "delete": 0}
    assert comp["read_amplification_before"] == round(18 / 6, 3) and comp["read_amplification_after"] == 1.0
    assert (comp["log_files_removed"], comp["log_bytes_removed"]) == (12, 5100)
    # 1 executor hour at 0.36, 2000 GETs at 0.4/1000, 10 PUTs and 1000 LISTs at 5/1000
    assert comp["cost"] == {"currency": "USD", "executor": 0.36, "requests": 0.8 + 0.05 + 5.0, "total": 6.21}
    clean = by_table["a"]["services"]["clean"]
    assert (clean["files_deleted"], clean["bytes_deleted"], clean["requests"]["delete"]) == (7, 700, 7)
    assert clean["read_amplification_before"] is None and clean["cost"]["total"] == 0.0
    assert by_table["a"]["total"]["actions"] == 4 and by_table["a"]["total"]["files_deleted"] == 7
    clus = by_table["b"]["services"]["clustering"]
    assert clus["actions"] == 1 and (clus["read_amplification_before"], clus["read_amplification_after"]) == (1.0, 1.0)
    assert doc["total"]["executor_seconds"] == 3960.0 and doc["total"]["actions"] == 5
    assert doc["total"]["cost"]["total"] == pytest.approx(6.21 + 0.036)
    code, only_b = answer_report(history, "table=b", CostSettings())
    assert code == 200 and only_b["priced"] is False and "cost" not in only_b["total"]
    assert [t["table"] for t in only_b["tables"]] == ["b"] and only_b["total"]["actions"] == 2
    assert answer_report(history, "limit=3", PRICES)[0] == 400
    assert ledger([], PRICES)["tables"] == []


_OLD_SCHEMA = """
CREATE TABLE actions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, "table" TEXT NOT NULL, action TEXT NOT NULL, instant TEXT NOT NULL,
    started REAL NOT NULL, ended REAL NOT NULL, outcome TEXT NOT NULL, records_read INTEGER NOT NULL,
    records_written INTEGER NOT NULL, bytes_read INTEGER NOT NULL, bytes_written INTEGER NOT NULL,
    files_deleted INTEGER NOT NULL, bytes_deleted INTEGER NOT NULL, instants_archived INTEGER NOT NULL,
    failed_writes_rolled_back INTEGER NOT NULL, error TEXT
);
"""


def test_a_history_file_of_an_older_daemon_is_read_and_extended(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(_OLD_SCHEMA)
    db.execute(
        "INSERT INTO actions VALUES (NULL, 't', 'clean', '1', 1.0, ?, 'completed', 0, 0, 0, 0, 3, 30, 0, 0, NULL)",
        (time.time(),),
    )
    db.commit()
    db.close()
    reader = ActionHistory(str(path), read_only=True)  # an offline reader never changes the file
    (old,) = reader.query()
    assert (old.files_deleted, old.bytes_deleted, old.executor_seconds, old.requests_get) == (3, 30, 0.0, 0)
    reader.close()
    writer = ActionHistory(str(path))
    assert writer.record(_record("t", "compaction", time.time(), executor_seconds=2.5, requests_put=4))
    newest, oldest = writer.query()
    assert (newest.executor_seconds, newest.requests_put) == (2.5, 4)
    assert (oldest.files_deleted, oldest.executor_seconds) == (3, 0.0)
    writer.close()
    columns = {row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(actions)")}
    assert {"executor_seconds", "requests_put", "files_before", "log_bytes_removed"} <= columns


def test_report_command_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history_file = tmp_path / "h.sqlite"
    history = ActionHistory(str(history_file))
    history.record(
        _record("trips", "compaction", time.time(), executor_seconds=7200.0, requests_get=1000, file_groups_before=2,
                file_groups_after=2, files_before=6, files_after=2, log_files_removed=4, log_bytes_removed=4096)
    )  # fmt: skip
    history.close()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"service:\n  history: {{path: {history_file}}}\n"
        "  cost: {executor_hour: 0.5, per_1000_requests: {get: 1}}\n"
    )
    assert main(["report", "--config", str(cfg), "--offline", "--since", "1d"]) == 0
    out = capsys.readouterr().out
    assert "trips" in out
    assert "  compaction     1 actions (0 failed); executor 2.000 h;" in out
    assert "requests GET 1000" in out and "log files off the read path 4 (4096 B)" in out
    assert "files per file group 3.0 -> 1.0" in out and "cost 2.0000 USD" in out
    assert main(["report", "--config", str(cfg), "--offline", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["total"]["cost"] == {"currency": "USD", "executor": 1.0, "requests": 1.0, "total": 2.0}
    assert main(["report", "--config", str(cfg), "--offline", "--since", "yesterday"]) == 2


@pytest.mark.spark
def test_a_compaction_records_its_cost_and_benefit(tmp_path: Path, spark_executor: Any) -> None:
    """The record of a compaction equals what independent sources say: the plan's slices (files read before), the
    log files' sizes on storage, the commit's runtime stats (executor seconds); the ledger metrics agree."""
    path, _ctx, planned = with_pending_compaction(tmp_path / "t", spark_executor, records=120, commits=3)
    table = HudiTable.open(Storage(), path)
    ops = table.compaction_plan(planned).operations or ()
    assert ops, "a plan without operations proves nothing"
    files_before = sum((1 if op.data_file_path else 0) + len(op.delta_file_paths or ()) for op in ops)
    log_bytes = sum(
        (Path(path) / (op.partition_path or "") / name).stat().st_size
        for op in ops
        for name in op.delta_file_paths or ()
    )
    registry = CollectorRegistry()
    history = ActionHistory(str(tmp_path / "h.sqlite"))
    settings = TableSettings(
        uri=path,
        name="priced",
        compaction=ServiceSettings(CompactionPolicy(), schedule=False),
        clean=ServiceSettings(CleanPolicy(), schedule=False, execute=False),
        archival=ServiceSettings(ArchivalPolicy(), schedule=False, execute=False),
    )
    worker = TableWorker(
        settings, Storage(), InProcessLockProvider(), spark_executor, Metrics(registry), history=history
    )
    result = worker.run_pass()
    assert not result.failed and len(result.completed) == 1
    (record,) = [r for r in history.query() if r.action == "compaction"]
    assert record.outcome is ActionOutcome.COMPLETED
    assert (record.file_groups_before, record.file_groups_after) == (len(ops), len(ops))
    assert (record.files_before, record.files_after) == (files_before, len(ops))
    assert record.log_files_removed == sum(len(op.delta_file_paths or ()) for op in ops)
    assert record.log_bytes_removed == log_bytes
    done = HudiTable.open(Storage(), path).timeline().get(planned.requested_time, Action.COMPACTION)
    assert done is not None and done.is_completed
    stats = [s for ss in table.commit_metadata(done).partition_to_write_stats.values() for s in ss]  # type: ignore[union-attr]
    upsert_ms = sum(s.runtime_stats.total_upsert_time or 0 for s in stats if s.runtime_stats)
    assert 0 < record.spark_seconds <= record.ended - record.started
    # The tasks' own clocks: at least the merge-and-write time they put in the write stats, at most the job's time
    # on both task slots (local[2]).
    assert upsert_ms > 0 and upsert_ms / 1000 <= record.executor_seconds <= 2 * record.spark_seconds
    base_rows = sum(
        pq.ParquetFile(Path(path) / (op.partition_path or "") / op.data_file_path).metadata.num_rows
        for op in ops
        if op.data_file_path
    )
    log_records = sum(s.total_log_records or 0 for s in stats)
    assert log_records > 0 and record.records_read == base_rows + log_records
    labels = {"table": "priced", "action": "compaction"}
    assert registry.get_sample_value("tableservice_executor_seconds_total", labels) == record.executor_seconds
    assert registry.get_sample_value("tableservice_read_records_total", labels) == base_rows + log_records
    assert registry.get_sample_value("tableservice_read_path_files_before_total", labels) == files_before
    assert registry.get_sample_value("tableservice_read_path_log_bytes_removed_total", labels) == log_bytes
