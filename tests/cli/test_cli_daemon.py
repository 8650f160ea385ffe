"""`tableservice once` and `tableservice status` on real and generated tables (no Spark job needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tableservice.cli import main
from tableservice.hudi.models import (
    HoodieCleanerPlan,
    HoodieCleanFileInfo,
    HoodieCompactionOperation,
    HoodieCompactionPlan,
    encode_cleaner_plan,
    encode_compaction_plan,
)
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.storage import Storage
from tests.support.daemon_helpers import config_text, mor_table
from tests.support.fixtures import fixture_table


def _bad_plan(path: str) -> str:
    table = HudiTable.open(Storage(), path)
    t = table.active.new_instant_time(table.timeline())
    plan = HoodieCompactionPlan(
        operations=(
            HoodieCompactionOperation(
                base_instant_time=t,
                delta_file_paths=(".x-0_1.log.1_0-0-0",),
                data_file_path=None,
                file_id="x-0",
                partition_path="city=nowhere",
                metrics={},
                bootstrap_file_path="",
            ),
        ),
        extra_metadata={},
        version=2,
    )
    table.active.create_requested(t, Action.COMPACTION, encode_compaction_plan(plan, table_version=9))
    return t


def test_once_exits_non_zero_when_an_action_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = mor_table(tmp_path / "t", records=100, commits=2)
    t = _bad_plan(path)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text([path], max_delta_commits=50))
    assert main(["once", "--config", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert f"compaction {t} failed" in err and "x-0" in err


def test_status_lists_pending_actions_and_health(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = mor_table(tmp_path / "t", records=100, commits=2)
    t = _bad_plan(path)
    mdt = fixture_table("quickstart_trips_table/mor/avro/v8_trips_8i3u1d", tmp_path)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text([path, str(mdt)], max_delta_commits=50))
    assert main(["status", "--config", str(cfg), "--offline", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    by_uri = {r["uri"]: r for r in out["tables"]}
    mine = by_uri[path]
    assert mine["table_type"] == "MERGE_ON_READ" and mine["table_version"] == 9
    assert [(p["instant"], p["action"], p["state"]) for p in mine["pending"]] == [(t, "compaction", "REQUESTED")]
    assert mine["health"] == "ok"
    assert by_uri[str(mdt)]["health"] == "ok"  # version 8 metadata tables are kept in step
    assert by_uri[str(mdt)]["last_compaction"] == "20251220210129235"
    v6 = fixture_table("tests-data/cow/v6_partitioned_metadata", tmp_path / "v6")  # Hudi 0.14, metadata table
    cfg.write_text(config_text([str(v6)], max_delta_commits=50))
    assert main(["status", "--config", str(cfg), "--offline", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["tables"]
    assert (row["table_version"], row["health"], row["health_reason"]) == (6, "ok", None)


@pytest.mark.spark
def test_once_serves_the_tables_after_one_whose_clean_plan_names_a_nul_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = mor_table(tmp_path / "bad", records=100, commits=2, name="bad")
    good = mor_table(tmp_path / "good", records=100, commits=2, name="good")
    table = HudiTable.open(Storage(), bad)
    partition = "city=san_francisco"
    plan = HoodieCleanerPlan(
        earliest_instant_to_retain=None,
        last_completed_commit_timestamp="",
        policy="KEEP_LATEST_COMMITS",
        files_to_be_deleted_per_partition={},
        version=2,
        file_paths_to_be_deleted_per_partition={
            partition: (
                HoodieCleanFileInfo(
                    file_path=f"file:{bad}/{partition}/x\x00_0-0-0_20240101000000000.parquet",
                    is_bootstrap_base_file=False,
                ),
            )
        },
        partitions_to_be_deleted=(),
        extra_metadata={},
    )
    t = table.active.new_instant_time(table.timeline())
    table.active.create_requested(t, Action.CLEAN, encode_cleaner_plan(plan, table_version=9))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text([bad, good], max_delta_commits=1))
    assert main(["once", "--config", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert f"table0: clean {t} failed: invalid plan: " in err and "control character" in err
    good_pending = HudiTable.open(Storage(), good).timeline().pending()
    assert [i.action for i in good_pending] == []  # served: its compaction was scheduled and completed
    done = HudiTable.open(Storage(), good).timeline().completed().filter(lambda i: i.action is Action.COMPACTION)
    assert len(done) == 1
    assert HudiTable.open(Storage(), bad).timeline().get(t, Action.CLEAN).is_requested  # type: ignore[union-attr]


def test_once_and_operator_runs_go_to_the_action_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`once` (and every operator command given --config) records the actions it ran in the daemon's history file:
    here a clean, with the files it deleted as its metadata says."""
    from tableservice.hudi.models import decode_clean_metadata
    from tableservice.hudi.table.config import TableType
    from tableservice.hudi.timeline.instant import Action
    from tableservice.service.history import ActionHistory
    from tests.support.clean_helpers import build

    path = str(tmp_path / "t")
    build(path, 9, TableType.COPY_ON_WRITE)
    history_file = tmp_path / "state" / "history.sqlite"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"service:\n  history: {{path: {history_file}}}\n"
        "defaults:\n  clean: {hoodie.cleaner.commits.retained: 2, hoodie.clean.max.commits: 1}\n"
        "  clustering: {enabled: false}\n  archival: {enabled: false}\n  indexing: {enabled: false}\n"
        f"tables:\n  - uri: {path}\n    name: cleaned\n"
    )
    assert main(["once", "--config", str(cfg)]) == 0, capsys.readouterr().err
    table = HudiTable.open(Storage(), path)
    (clean,) = [i for i in table.timeline().completed() if i.action is Action.CLEAN]
    md = decode_clean_metadata(table.active.read(clean), path=table.active.path_of(clean))
    assert md.total_files_deleted > 0
    records = ActionHistory(str(history_file), read_only=True).query()
    assert [(r.table, r.action, r.instant, str(r.outcome), r.files_deleted) for r in records] == [
        ("cleaned", "clean", clean.requested_time, "completed", md.total_files_deleted)
    ]
