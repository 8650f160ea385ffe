"""The command line on real and generated tables."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tableservice.cli import main
from tableservice.hudi.table.config import load_table_config
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import parse_instant_file_name
from tableservice.storage import Storage
from tests.support.fixtures import fixture_names, fixture_table_readonly
from tests.support.oracle import assert_same_rows, hudi_read, hudi_slices

NAMES = fixture_names()


def _show(path: str, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["table", "show", path, "--json"]) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


@pytest.mark.oracle
@pytest.mark.parametrize("name", NAMES or ["none"])
def test_table_show_lists_what_is_on_disk(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    if name == "none":
        pytest.skip("no fixtures")
    path = str(fixture_table_readonly(name))
    info = _show(path, capsys)
    # Instants: exactly the requested times of the instant files in the timeline folder.
    config = load_table_config(Storage(), path)
    on_disk = set()
    for f in (Path(path) / config.timeline_folder).iterdir():
        parsed = parse_instant_file_name(f.name)
        if parsed is not None:
            on_disk.add(parsed.requested_time)
    timeline = info["timeline"]
    assert isinstance(timeline, dict)
    listed = [i["requested_time"] for i in timeline["pending"] + timeline["completed"]]
    assert sorted(listed) == sorted(on_disk)
    # Latest slices of visible file groups: exactly hudi-rs's.
    latest = set()
    partitions = info["partitions"]
    assert isinstance(partitions, list)
    for p in partitions:
        for g in p["file_groups"]:
            if g["replaced_by"]:
                continue
            s = g["slices"][0]
            latest.add((p["partition"], g["file_id"], s["base_file"] or "", tuple(sorted(s["log_files"]))))
    assert latest == hudi_slices(path)
    # Every data file on disk appears in exactly one slice.
    files_on_disk = {
        f.name
        for f in Path(path).rglob("*")
        if f.is_file() and ".hoodie" not in f.parts and not f.name.startswith(".hoodie_partition_metadata")
    }
    listed_files = [
        name
        for p in partitions
        for g in p["file_groups"]
        for s in g["slices"]
        for name in ([s["base_file"]] if s["base_file"] else []) + s["log_files"]
    ]
    assert len(listed_files) == len(set(listed_files))
    assert set(listed_files) <= files_on_disk


def test_generate_show_and_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "t")
    assert (
        main(
            [
                "generate",
                path,
                "--table-type",
                "MERGE_ON_READ",
                "--table-version",
                "8",
                "--records",
                "300",
                "--commits",
                "3",
                "--update-fraction",
                "0.2",
                "--delete-fraction",
                "0.05",
                "--log-block",
                "parquet",
                "--partitions",
                "2",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("deltacommit") == 3
    info = _show(path, capsys)
    table = info["table"]
    assert isinstance(table, dict)
    assert table["table_version"] == 8 and table["table_type"] == "MERGE_ON_READ"
    assert table["partition_fields"] == ["city"]
    out_file = tmp_path / "rows.parquet"
    assert main(["table", "read", path, "--out", str(out_file)]) == 0
    capsys.readouterr()
    assert_same_rows(pq.read_table(out_file), hudi_read(path), "cli read --out")
    assert main(["table", "read", path, "--columns", "uuid,city", "--filter", "city=sao_paulo", "--limit", "5"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 5
    assert all(json.loads(line)["city"] == "sao_paulo" and set(json.loads(line)) == {"uuid", "city"} for line in lines)


def test_errors_are_typed_and_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["table", "show", str(tmp_path / "nothing")]) == 1
    err = capsys.readouterr().err
    assert f"missing file: no table here: the folder does not exist | file={tmp_path / 'nothing'}" in err
    (tmp_path / "empty").mkdir()
    assert main(["table", "show", str(tmp_path / "empty"), "--log-level", "ERROR"]) == 1  # options after the command
    err = capsys.readouterr().err
    assert "table configuration: not a Hudi table: the folder exists" in err and "hoodie.properties" in err
    assert "Error" not in err  # plain words, no class names


def test_global_options_go_anywhere_and_help_shows_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    from tableservice.cli import hoist_global_options

    assert hoist_global_options(["table", "show", "x", "--log-level", "DEBUG"]) == [
        "--log-level",
        "DEBUG",
        "table",
        "show",
        "x",
    ]
    assert hoist_global_options(["table", "read", "x", "--log-level=INFO", "--", "--log-level"]) == [
        "--log-level=INFO",
        "table",
        "read",
        "x",
        "--",
        "--log-level",
    ]
    with pytest.raises(SystemExit):
        main(["compact", "schedule", "--help"])
    assert "(default: None)" in capsys.readouterr().out


@pytest.mark.oracle
def test_write_adds_commits_to_a_generated_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "t")
    assert main(["generate", path, "--records", "200", "--commits", "2", "--max-file-records", "50"]) == 0
    before = hudi_read(path)  # 198 live records: 65 = 25% of them updated + 15 inserts, 20 = 10% deleted
    commits_before = len(HudiTable.open(Storage(), path).timeline().completed_writes())
    capsys.readouterr()
    args = ["--commits", "2", "--update-fraction", "0.25", "--delete-fraction", "0.1", "--records", "15"]
    assert main(["write", path, *args]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all("deltacommit" in line and "65 records, 20 deletes" in line for line in out), out
    after = hudi_read(path)
    keys_before, keys_after = set(before.column("uuid").to_pylist()), set(after.column("uuid").to_pylist())
    new = keys_after - keys_before
    assert len(new) == 30 and all(k.split("-")[1] == "0011" for k in new)
    assert len(keys_before - keys_after) == 40 and after.num_rows == before.num_rows - 40 + 30
    ts_before = dict(zip(before.column("uuid").to_pylist(), before.column("ts").to_pylist(), strict=True))
    changed = [
        k
        for k, t in zip(after.column("uuid").to_pylist(), after.column("ts").to_pylist(), strict=True)
        if k in ts_before and t != ts_before[k]
    ]
    assert 50 <= len(changed) <= 100  # updated keys moved on (a late update keeps the stored time)
    assert len(HudiTable.open(Storage(), path).timeline().completed_writes()) == commits_before + 2
    assert main(["write", str(tmp_path / "missing")]) == 1


def test_table_show_health_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support.clean_helpers import complete_compaction, schedule_compaction
    from tests.support.daemon_helpers import mor_table

    path = mor_table(tmp_path / "t", records=200, commits=3)
    first = schedule_compaction(path)
    complete_compaction(path, first)
    assert main(["write", path, "--commits", "1", "--update-fraction", "0.3"]) == 0  # new log files
    pending = schedule_compaction(path)
    capsys.readouterr()
    assert main(["table", "show", path, "--json"]) == 0
    health = json.loads(capsys.readouterr().out)["health"]
    view = HudiTable.open(Storage(), path).file_system_view()
    slices = view.latest_merged_slices()
    assert health["file_groups"] == len(slices)
    assert health["file_groups_with_logs"] == sum(1 for s in slices if s.log_files)
    assert health["log_bytes"] == sum(s.log_size for s in slices if s.log_files)
    assert health["small_base_files"] == sum(1 for s in slices if s.base_file is not None)  # all far below 300 MiB
    assert health["last_completed"]["compaction"] == {"instant": first.requested_time, "archived": False}
    assert health["last_completed"]["clean"] is None
    oldest = health["oldest_pending"]["compaction"]
    assert oldest["instant"] == pending.requested_time and oldest["state"] == "REQUESTED"
    assert 0 <= oldest["age_seconds"] < 600
