"""`tableservice index schedule|run|list|abort|drop` on a generated table: plans are written, run on Spark, listed
with their sizes, dropped; the table verifies in step after each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tableservice.cli import main
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.storage import Storage
from tests.support.metadata_table import partition_records
from tests.support.oracle import hudi_read
from tests.support.trip_tables import create_trip_table

pytestmark = [pytest.mark.spark, pytest.mark.oracle]


def _listed(path: str, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
    assert main(["index", "list", path, "--json"]) == 0
    return {r["partition"]: r for r in json.loads(capsys.readouterr().out)["indexes"]}


def test_index_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str], spark_executor: Any) -> None:
    path = str(tmp_path / "t")
    create_trip_table(path, 9, TableType.MERGE_ON_READ)
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=60))
    for step in Workload(200, 3, 0.3, 0.05, partitions=2, seed=21).steps():
        client.apply(step)
    assert main(["index", "list", path]) == 0
    assert "no metadata-table index" in capsys.readouterr().out

    assert main(["index", "schedule", path, "--partition", "record_index"]) == 0
    assert "scheduled indexing" in capsys.readouterr().out
    assert main(["index", "schedule", path, "--partition", "record_index"]) == 0
    assert "already built or planned" in capsys.readouterr().out
    assert _listed(path, capsys)["record_index"]["state"] == "planned"
    assert main(["index", "abort", path]) == 0
    assert "aborted indexing" in capsys.readouterr().out
    assert _listed(path, capsys) == {}

    assert main(["index", "schedule", path, "--partition", "record_index"]) == 0
    assert (
        main(["index", "schedule", path, "--partition", "secondary_index", "--name", "rider_idx", "--columns", "rider"])
        == 0
    )
    capsys.readouterr()
    assert main(["index", "run", path]) == 0
    out = capsys.readouterr().out
    assert "files, record_index" in out and "secondary_index_rider_idx" in out
    listed = _listed(path, capsys)
    assert {p: r["state"] for p, r in listed.items()} == {
        "files": "completed",
        "record_index": "completed",
        "secondary_index_rider_idx": "completed",
    }
    assert all(r["files"] > 0 and r["bytes"] > 0 for r in listed.values())
    assert main(["table", "verify", path]) == 0
    capsys.readouterr()
    keys = hudi_read(path).column("_hoodie_record_key").to_pylist()
    assert sorted(partition_records(path, "record_index")) == sorted(keys)
    table = HudiTable.open(Storage(), path)
    assert not table.timeline().pending_of(Action.INDEXING)

    assert main(["index", "drop", path, "--partition", "record_index"]) == 0
    assert "dropped record_index" in capsys.readouterr().out
    assert "record_index" not in _listed(path, capsys)
    assert main(["index", "drop", path, "--partition", "record_index"]) == 1
    capsys.readouterr()
    assert main(["table", "verify", path]) == 0
