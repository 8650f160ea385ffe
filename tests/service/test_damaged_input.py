"""Damaged committed data is never compacted over: the daemon stops compaction for that table (the service is
quarantined, with the file and the instant in /status and the metrics), writes nothing, and goes on serving the
table's other services and the other tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tableservice.config import load_config
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.service.daemon import Daemon
from tableservice.storage import Storage
from tests.support.daemon_helpers import config_text, mor_table, run_until, with_pending_compaction


def _files(path: str) -> dict[str, bytes]:
    """Every data file of the table (outside .hoodie) with its bytes."""
    root = Path(path)
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".hoodie" not in p.relative_to(root).parts
    }


@pytest.mark.spark
def test_damaged_input_quarantines_compaction_and_writes_nothing(tmp_path: Path, spark_executor: Any) -> None:
    # 1. a pending compaction whose plan names a committed log file that was then truncated
    truncated_at, ctx, pending = with_pending_compaction(tmp_path / "a", spark_executor, records=200, commits=3)
    table = ctx.table
    op = next(o for o in table.compaction_plan(pending).operations or () if o.delta_file_paths)
    log_file = Path(truncated_at) / (op.partition_path or "") / (op.delta_file_paths or ())[0]
    log_file.write_bytes(log_file.read_bytes()[:-5])
    # 2. a table whose latest base file of a file group with log files is missing: a plan would drop its rows
    missing_at = mor_table(tmp_path / "b", records=200, commits=3, name="b")
    b = HudiTable.open(Storage(), missing_at)
    victim = next(
        s for s in b.file_system_view(timeline=b.timeline()).latest_merged_slices() if s.log_files and s.base_file
    )
    assert victim.base_file is not None
    Path(victim.base_file.location).unlink()
    before = {truncated_at: _files(truncated_at), missing_at: _files(missing_at)}

    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text([truncated_at, missing_at], max_delta_commits=2, poll=0.2))
    daemon = Daemon(str(cfg), load_config(str(cfg)), executor=spark_executor)
    passes: dict[str, list[float]] = {truncated_at: [], missing_at: []}

    def done() -> bool:
        for task in daemon.tables.values():
            status = task.worker.status
            if "compaction" in status.quarantined_services and status.last_poll not in passes[status.uri]:
                passes[status.uri].append(status.last_poll or 0.0)
        return all(len(p) >= 3 for p in passes.values())

    run_until(daemon, done)
    statuses = {t.worker.status.uri: t.worker.status for t in daemon.tables.values()}

    a = statuses[truncated_at]
    reason = str(a.quarantined_services["compaction"]["reason"])
    assert log_file.name in reason and "holds" in reason, reason
    assert a.health == "degraded" and "compaction quarantined" in (a.health_reason or "")
    assert a.consecutive_failures == 0  # the table is served on
    plan_state = HudiTable.open(Storage(), truncated_at).timeline().get(pending.requested_time, Action.COMPACTION)
    assert plan_state is not None and plan_state.is_requested  # never moved to inflight: nothing ran
    assert _files(truncated_at) == before[truncated_at]  # not a byte of data written or removed

    m = statuses[missing_at]
    assert victim.base_file.file_name in str(m.quarantined_services["compaction"]["reason"])
    compactions = HudiTable.open(Storage(), missing_at).timeline().filter(lambda i: i.action is Action.COMPACTION)
    assert list(compactions) == []  # no plan that would rebuild the group from its logs alone
    assert _files(missing_at) == before[missing_at]

    text = daemon.metrics.render()[0].decode()
    for label in ("table0", "table1"):
        assert f'tableservice_service_quarantined{{action="compaction",table="{label}"}} 1.0' in text
        assert f'tableservice_table_errors_total{{kind="DamagedInputError",table="{label}"}}' in text
        assert f'tableservice_service_quarantined{{action="clean",table="{label}"}} 0.0' in text
