"""`schedule --dry-run` on compaction, clustering, clean and index: the plan printed is the one the real command
then writes (same Hudi JSON model, decoded from the requested file), and the dry run leaves the table folder
byte for byte as it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tableservice.cli import main
from tableservice.hudi.models import decode_instant_content
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Instant
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table
from tests.support.trip_tables import create_trip_table


def folder_state(path: str) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under `path`, hidden ones included."""
    root = Path(path)
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def dry_run(argv: list[str], path: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """Run `argv` with --dry-run (readable, then --json); the folder must not change. Returns the JSON."""
    before = folder_state(path)
    assert main([*argv, "--dry-run"]) == 0
    readable = capsys.readouterr().out
    assert readable.startswith("dry run: would schedule") and "nothing was written" in readable
    assert main([*argv, "--dry-run", "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    shown = readable.split(":")[1].split()[-1]  # "dry run: would schedule <what> <instant>: ..."
    assert shown <= doc["instant"]  # each run takes a new instant time unless one was given
    assert folder_state(path) == before
    return doc


def written_plan(path: str, instant: Instant) -> dict[str, Any]:
    table = HudiTable.open(Storage(), path)
    file = table.active.path_of(instant)
    data = Path(file).read_bytes()
    content = decode_instant_content(data, action=instant.action.value, state=instant.state, path=file)
    assert content is not None
    return content.to_avro()


def only_pending(path: str) -> Instant:
    (instant,) = HudiTable.open(Storage(), path).timeline().pending().instants
    return instant


@pytest.mark.parametrize("version", [6, 9])
def test_compaction_dry_run_is_the_plan_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: int
) -> None:
    path = mor_table(tmp_path / "t", version=version, records=120, commits=3)
    t = "29990101000000000"  # the same instant for both runs: the plans must be equal as a whole
    doc = dry_run(["compact", "schedule", path, "--instant", t], path, capsys)
    assert (doc["action"], doc["instant"]) == ("compaction", t)
    assert doc["file"].endswith(f".hoodie/{'timeline/' if version >= 8 else ''}{t}.compaction.requested")
    assert main(["compact", "schedule", path, "--instant", t]) == 0
    assert f"scheduled compaction {t}" in capsys.readouterr().out
    instant = only_pending(path)
    assert instant.requested_time == t
    assert doc["plan"] == written_plan(path, instant)
    assert doc["plan"]["operations"]  # a plan with work in it
    assert {"baseInstantTime", "deltaFilePaths", "fileId", "partitionPath"} <= set(doc["plan"]["operations"][0])


def test_clustering_dry_run_is_the_plan_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = mor_table(tmp_path / "t", records=200, commits=2, max_file_records=30)
    args = ["cluster", "schedule", path, "-o", "hoodie.clustering.plan.strategy.sort.columns=fare"]
    doc = dry_run(args, path, capsys)
    assert doc["action"] == "clustering"
    assert main(args) == 0
    instant = only_pending(path)
    assert instant.requested_time > doc["instant"]  # a new instant time, taken under the lock
    assert doc["plan"] == written_plan(path, instant)
    assert doc["plan"]["clusteringPlan"]["strategy"]["strategyParams"][
        "hoodie.clustering.plan.strategy.sort.columns"
    ] == ("fare")


def test_clean_dry_run_is_the_plan_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "cow")
    create_trip_table(path, 9, TableType.COPY_ON_WRITE, name="cow")
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=100))
    for step in Workload(200, 4, 0.5, 0.0, partitions=1).steps():
        client.apply(step)
    args = ["clean", "schedule", path, "-o", "hoodie.cleaner.commits.retained=1"]
    doc = dry_run(args, path, capsys)
    assert main(args) == 0
    instant = only_pending(path)
    assert doc["plan"] == written_plan(path, instant)
    files = [f for fs in doc["plan"]["filePathsToBeDeletedPerPartition"].values() for f in fs]
    assert files and all(Path(f["filePath"].removeprefix("file:")).is_file() for f in files)


def test_index_dry_run_is_the_plan_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "t")
    create_trip_table(path, 9, TableType.MERGE_ON_READ)
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=60))
    for step in Workload(100, 2, 0.3, 0.0, partitions=2, seed=3).steps():
        client.apply(step)
    args = ["index", "schedule", path, "--partition", "secondary_index", "--name", "rider_idx", "--columns", "rider"]
    doc = dry_run(args, path, capsys)  # neither the plan nor the index definitions are written
    assert main(args) == 0
    instant = only_pending(path)
    assert doc["plan"] == written_plan(path, instant)
    completed = HudiTable.open(Storage(), path).timeline().completed().instants[-1].requested_time
    assert doc["plan"]["indexPartitionInfos"][0]["indexUptoInstant"] == completed
    assert doc["plan"]["indexPartitionInfos"][0]["metadataPartitionPath"] == "secondary_index_rider_idx"


def test_dry_run_with_nothing_to_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = mor_table(tmp_path / "t", records=60, commits=1)
    before = folder_state(path)
    assert main(["clean", "schedule", path, "--dry-run"]) == 0
    assert capsys.readouterr().out.strip() == (
        "dry run: nothing to clean: every file version is among the file versions the last 10 commits need "
        "(KEEP_LATEST_COMMITS)"
    )
    assert main(["clean", "schedule", path, "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"table": "t", "dry_run": True, "plan": None}
    assert folder_state(path) == before


def test_nothing_to_cluster_names_the_pending_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A clustering plan is pending over every small file group: the next schedule says so and what to run."""
    path = mor_table(tmp_path / "t", records=120, commits=2)
    assert main(["cluster", "schedule", path]) == 0
    first = capsys.readouterr().out
    assert first.startswith("scheduled clustering ")
    t = first.split()[2]
    assert main(["cluster", "schedule", path]) == 0
    assert capsys.readouterr().out.strip() == (
        f"nothing to cluster: clustering {t} (requested) is pending and holds its file groups (run it: "
        "`tableservice cluster run`); no other file group has a base file under "
        "hoodie.clustering.plan.strategy.small.file.limit = 314572800 bytes"
    )
