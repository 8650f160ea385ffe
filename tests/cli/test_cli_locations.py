"""Relative table URIs on the command line: plans always name absolute paths under the table's base path, and a
plan made in one folder runs from any other; planners refuse to write a plan naming a relative path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tableservice.cli.locations import absolute_location
from tableservice.errors import InvalidPlanError
from tableservice.hudi.action.plan_paths import check_plan_location, plan_location
from tableservice.hudi.action.rollback import plan_rollback
from tableservice.hudi.models import decode_cleaner_plan
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.planning.clean.plan import plan_clean
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.clustering.plan import ClusteringPolicy, plan_clustering
from tableservice.storage import Storage

REPO = Path(__file__).resolve().parents[2]


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "tableservice", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def _data_files(base: Path) -> set[str]:
    return {str(p) for p in base.rglob("*.parquet") if ".hoodie" not in p.parts}


def test_clean_planned_with_a_relative_uri_runs_from_elsewhere(tmp_path: Path) -> None:
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    made = _cli(work, "generate", "tbl", "--table-type", "COPY_ON_WRITE", "--records", "60", "--commits", "4",
                "--update-fraction", "0.5", "--partitions", "1")  # fmt: skip
    assert made.returncode == 0, made.stderr
    base = (work / "tbl").resolve()
    before = _data_files(base)

    scheduled = _cli(work, "clean", "schedule", "file:tbl", "-o", "hoodie.cleaner.commits.retained=1")
    assert scheduled.returncode == 0, scheduled.stderr
    table = HudiTable.open(Storage(), str(base))
    [instant] = table.timeline().pending_of(Action.CLEAN)
    plan_file = table.active.path_of(instant)
    plan = decode_cleaner_plan(Storage().read_bytes(plan_file), path=plan_file)
    paths = [str(f.file_path) for files in (plan.file_paths_to_be_deleted_per_partition or {}).values() for f in files]
    assert paths
    for path in paths:
        assert path.startswith(f"file:{base}/"), path
    planned = {p[len("file:") :] for p in paths}
    assert planned < before

    ran = _cli(elsewhere, "clean", "run", str(base), "--execute")
    assert ran.returncode == 0, ran.stderr
    assert f"completed clean {instant.requested_time}: {len(planned)} files deleted" in ran.stdout
    assert _data_files(base) == before - planned


def test_absolute_location() -> None:
    cwd = os.getcwd()
    assert absolute_location("t") == os.path.join(cwd, "t")
    assert absolute_location("file:t/../u") == os.path.join(cwd, "u")
    assert absolute_location("file:///data/t/") == "/data/t"
    assert absolute_location("s3a://bucket/t") == "s3a://bucket/t"


def test_plan_locations_must_be_absolute_under_the_base_path() -> None:
    assert plan_location("/data/t", "/data/t/p/f.parquet", table="t") == "file:/data/t/p/f.parquet"
    assert plan_location("file:/data/t", "file:/data/t/f.parquet", table="t") == "file:/data/t/f.parquet"
    assert plan_location("s3://b/t", "s3://b/t/p/f.parquet", table="t") == "s3://b/t/p/f.parquet"
    for base, location in [
        ("t", "t/p/f.parquet"),
        ("/data/t", "t/p/f.parquet"),
        ("/data/t", "/data/other/f.parquet"),
        ("/data/t", "/data/t/../u/f.parquet"),
        ("/data/t", "/data/tt/f.parquet"),
        ("s3://b/t", "s3://b/u/f.parquet"),
        ("s3://b/t", "/data/t/f.parquet"),
    ]:
        with pytest.raises(InvalidPlanError) as err:
            check_plan_location(base, location, table="trips")
        assert err.value.table == "trips" and err.value.path == location


def test_planners_refuse_a_table_opened_at_a_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    made = _cli(tmp_path, "generate", "tbl", "--table-type", "COPY_ON_WRITE", "--records", "40", "--commits", "3",
                "--update-fraction", "0.5", "--partitions", "1")  # fmt: skip
    assert made.returncode == 0, made.stderr
    table = HudiTable.open(Storage(), "tbl")
    policy = CleanPolicy.from_mapping({"hoodie.cleaner.commits.retained": "1"})
    with pytest.raises(InvalidPlanError) as err:
        plan_clean(table, "29990101000000000", policy)
    assert err.value.table == table.name and err.value.path is not None and err.value.path.startswith("tbl/")
    last = table.timeline().completed_writes().last()
    assert last is not None
    with pytest.raises(InvalidPlanError) as err:
        plan_rollback(table, last)
    assert err.value.path is not None and err.value.path.startswith("tbl/")
    with pytest.raises(InvalidPlanError) as err:
        plan_clustering(table, "29990101000000000", ClusteringPolicy())
    assert err.value.path is not None and err.value.path.startswith("tbl/")
    # The same table opened at its absolute path plans normally.
    absolute = HudiTable.open(Storage(), str(tmp_path / "tbl"))
    planned = plan_clean(absolute, "29990101000000000", policy)
    assert planned is not None
    clustering = plan_clustering(absolute, "29990101000000000", ClusteringPolicy())
    assert clustering is not None
    paths = [s.data_file_path for g in clustering.input_groups or () for s in g.slices or ()]
    assert paths and all(str(p).startswith(f"file:{tmp_path}/tbl/") for p in paths)
