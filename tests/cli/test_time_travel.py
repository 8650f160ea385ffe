"""`table read --as-of` is exact or refused, and `--start/--end` say what they compare (issue 13, item 1): the
commands users ran, on tables written by our write client (versions 6 and 9), cleaned and archived; rows compared
with the equivalent 17-digit instant and with hudi-rs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tableservice.cli import main
from tableservice.hudi.action.archival import archive
from tableservice.hudi.action.clean import execute_clean
from tableservice.hudi.action.rollback import rollback
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import ReadOptions, read
from tableservice.hudi.table.time_travel import parse_query_time
from tableservice.hudi.timeline.instant import Action
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.storage import Storage
from tests.support.clean_helpers import POLICIES, build, scheduled
from tests.support.instant_times import shifted
from tests.support.oracle import assert_same_rows, hudi_read
from tests.support.trip_tables import create_trip_table

VERSIONS = [6, 9]
ROOT = Path(__file__).resolve().parents[2]
ISSUE_DATE_TIME = "2026-11-23 19:59:37"  # the user's command in issue 13


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str, int, Path], str]]:
    """Each kind of table is written once per module; every test gets its own copy."""
    cache: dict[tuple[str, int], str] = {}

    def make(kind: str, version: int, dest: Path) -> str:
        key = (kind, version)
        if key not in cache:
            src = tmp_path_factory.mktemp(f"{kind}_v{version}") / "t"
            if kind == "mor":
                _mor_table(str(src), version)
            elif kind == "cleanable":
                build(str(src), version, TableType.MERGE_ON_READ)
            else:
                _cow_table(str(src), version, commits=6)
            cache[key] = str(src)
        target = dest / "t"
        shutil.copytree(cache[key], target)  # copy2 keeps modification times (v6 completion times)
        return str(target)

    yield make


def _mor_table(path: str, version: int) -> None:
    """Four delta commits; the second one starts in a later second than the first, so that the start of the third
    one's second (`yyyyMMddHHmmss`) still follows the first commit."""
    create_trip_table(path, version, TableType.MERGE_ON_READ, storage=Storage())
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=20))
    for n, step in enumerate(Workload(60, 4, 0.3, 0.03, partitions=2, seed=7).steps()):
        if n == 1:
            time.sleep(1.001 - (datetime.now().microsecond / 1_000_000))
        client.apply(step)


def _cow_table(path: str, version: int, commits: int) -> None:
    create_trip_table(path, version, TableType.COPY_ON_WRITE, storage=Storage())
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=20))
    for step in Workload(40, commits, 0.3, 0.0, partitions=2, seed=11).steps():
        client.apply(step)


def _writes(path: str) -> list[str]:
    return [i.requested_time for i in HudiTable.open(Storage(), path).timeline().completed_writes()]


def _run(capsys: pytest.CaptureFixture[str], path: str, out: Path, *args: str) -> tuple[int, pa.Table | None, str]:
    """(exit code, rows written, stderr) of `table read PATH ARGS --out OUT` through the CLI's main function."""
    if out.exists():
        out.unlink()
    capsys.readouterr()
    code = main(["table", "read", path, *args, "--out", str(out)])
    return code, pq.read_table(out) if code == 0 else None, capsys.readouterr().err


def _subprocess(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "tableservice", "table", "read", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def _date_time(t: str, millis: bool) -> str:
    text = f"{t[:4]}-{t[4:6]}-{t[6:8]} {t[8:10]}:{t[10:12]}:{t[12:14]}"
    return f"{text}.{t[14:17]}" if millis else text


def _refused(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("tableservice: "), err
    assert "Error" not in line and "InvalidTimeTravel" not in line, line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"


# --- the commands of the issue ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_the_issue_commands_are_refused_with_exit_2(
    version: int, tmp_path: Path, tables: Callable[[str, int, Path], str]
) -> None:
    path = tables("mor", version, tmp_path)
    first = _writes(path)[0]
    yesterday = _subprocess(path, "--as-of", "yesterday")
    assert yesterday.returncode == 2, yesterday.stderr
    assert yesterday.stdout == ""
    for fmt in ("yyyyMMddHHmmssSSS", "yyyyMMddHHmmss", "yyyy-MM-dd HH:mm:ss.SSS", "yyyy-MM-dd HH:mm:ss", "yyyy-MM-dd"):
        assert fmt in yesterday.stderr
    assert "'yesterday'" in yesterday.stderr and "Error" not in yesterday.stderr

    assert parse_query_time(ISSUE_DATE_TIME) < first  # the table was written after the issue's instant
    old = _subprocess(path, "--as-of", ISSUE_DATE_TIME)
    assert old.returncode == 2, old.stderr
    assert old.stdout == ""
    assert f"before the table's first commit {first}" in old.stderr
    assert "20261123195937999" in old.stderr  # the instant it was read as (Hudi: the end of that second)


@pytest.mark.parametrize(
    "value", ["yesterday", "2026-11-23T19:59:37", "1700000000", "2026-02-30", "20261323000000", ""]
)
def test_other_formats_are_refused(
    value: str, tmp_path: Path, tables: Callable[[str, int, Path], str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tables("mor", 9, tmp_path)
    code, rows, err = _run(capsys, path, tmp_path / "o.parquet", "--as-of", value)
    _refused(code, err, "accepted formats: yyyyMMddHHmmssSSS")
    assert rows is None


# --- every accepted format reads what its 17-digit instant reads ------------------------------------------------


@pytest.mark.oracle
@pytest.mark.parametrize("version", VERSIONS)
def test_every_format_reads_the_rows_of_its_instant(
    version: int, tmp_path: Path, tables: Callable[[str, int, Path], str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tables("mor", version, tmp_path)
    writes = _writes(path)
    mid = writes[2]
    assert mid[:14] + "000" > writes[0]
    day_after = (datetime.strptime(writes[-1][:8], "%Y%m%d") + timedelta(days=1)).strftime("%Y-%m-%d")
    cases = {
        mid: mid,
        mid[:14]: mid[:14] + "000",
        _date_time(mid, millis=True): mid,
        _date_time(mid, millis=False): mid[:14] + "999",
        day_after: day_after.replace("-", "") + "000000000",
    }
    out = tmp_path / "o.parquet"
    for given, instant in cases.items():
        code, rows, err = _run(capsys, path, out, "--as-of", given)
        assert code == 0, err
        assert f"-- as of {instant} (timeline zone UTC)" in err
        code, exact, _ = _run(capsys, path, out, "--as-of", instant)
        assert code == 0 and rows is not None and exact is not None
        assert_same_rows(rows, exact, f"--as-of {given!r} against {instant}")
        assert_same_rows(rows, hudi_read(path, as_of=instant), f"--as-of {given!r} against hudi-rs at {instant}")
        if len(given) in (14, 17):  # hudi-rs takes Hudi's timeline formats only
            assert_same_rows(rows, hudi_read(path, as_of=given), f"--as-of {given!r} against hudi-rs")
    # The formats name different snapshots here: the middle write's, and the latest one.
    _, at_mid, _ = _run(capsys, path, out, "--as-of", mid)
    _, latest, _ = _run(capsys, path, out)
    assert at_mid is not None and latest is not None
    assert sorted(set(at_mid.column("_hoodie_commit_time").to_pylist())) == sorted(
        t for t in set(latest.column("_hoodie_commit_time").to_pylist()) if t <= mid
    )
    assert max(latest.column("_hoodie_commit_time").to_pylist()) == writes[-1]


# --- cleaned, archived, pending, rolled back ---------------------------------------------------------------------


@pytest.mark.oracle
@pytest.mark.parametrize("policy", ["commits", "versions"])
@pytest.mark.parametrize("version", VERSIONS)
def test_cleaned_instants_are_refused_and_the_retained_ones_read_whole(
    version: int,
    policy: str,
    tmp_path: Path,
    tables: Callable[[str, int, Path], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tables("cleanable", version, tmp_path)
    writes = _writes(path)
    before = {t: read(HudiTable.open(Storage(), path), ReadOptions(as_of=t)) for t in writes}
    table, instant, _ = scheduled(path, CleanPolicy.from_mapping(POLICIES[policy]))
    md = execute_clean(table, instant)
    assert md.total_files_deleted > 0
    out = tmp_path / "o.parquet"

    code, _, err = _run(capsys, path, out, "--as-of", writes[0])
    _refused(code, err, f"--as-of {writes[0]} is older than the cleaner retains", f"clean {instant.requested_time}")
    oldest = err.strip().rsplit("the oldest exact as-of is ", 1)[1].split()[0]
    if policy == "commits":
        assert md.earliest_commit_to_retain and oldest >= md.earliest_commit_to_retain
    # Without the refusal the read would have been partial: the cleaned snapshot is not the one written.
    unchecked = read(HudiTable.open(Storage(), path), ReadOptions(as_of=writes[0]))
    assert unchecked.num_rows != before[writes[0]].num_rows or unchecked.to_pylist() != before[writes[0]].to_pylist()

    retained = [t for t in writes if t >= oldest]
    assert retained and retained != writes
    for t in retained:
        code, rows, err = _run(capsys, path, out, "--as-of", t)
        assert code == 0, err
        assert rows is not None
        assert_same_rows(rows, before[t], f"as of {t} after the clean against before it")
        assert_same_rows(rows, hudi_read(path, as_of=t), f"as of {t} against hudi-rs")
    for t in (w for w in writes if w < oldest):
        code, _, err = _run(capsys, path, out, "--as-of", t)
        _refused(code, err, "older than the cleaner retains")


@pytest.mark.oracle
@pytest.mark.parametrize("version", VERSIONS)
def test_archived_instants_are_refused(
    version: int, tmp_path: Path, tables: Callable[[str, int, Path], str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tables("cow", version, tmp_path)
    writes = _writes(path)
    before = {t: read(HudiTable.open(Storage(), path), ReadOptions(as_of=t)) for t in writes}
    policy = ArchivalPolicy.from_mapping({"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3"})
    archived = [i.requested_time for i in archive(HudiTable.open(Storage(), path), policy)]
    start = _writes(path)[0]
    assert archived and archived == [t for t in writes if t < start]
    out = tmp_path / "o.parquet"
    for t in archived:
        for given in (t, _date_time(t, millis=True)):
            code, _, err = _run(capsys, path, out, "--as-of", given)
            _refused(code, err, "is archived; the active timeline starts at " + start)
    for t in (w for w in writes if w >= start):
        code, rows, err = _run(capsys, path, out, "--as-of", t)
        assert code == 0, err
        assert rows is not None
        assert_same_rows(rows, before[t], f"as of {t} after archival against before it")
        assert_same_rows(rows, hudi_read(path, as_of=t), f"as of {t} against hudi-rs")


@pytest.mark.parametrize("version", VERSIONS)
def test_pending_write_bounds_time_travel_and_a_rolled_back_one_reads_what_came_before(
    version: int, tmp_path: Path, tables: Callable[[str, int, Path], str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tables("mor", version, tmp_path)
    writes = _writes(path)
    table = HudiTable.open(Storage(), path)
    pending_time = table.active.new_instant_time(table.reload())
    pending = table.active.transition_to_inflight(table.active.create_requested(pending_time, Action.DELTA_COMMIT))
    out = tmp_path / "o.parquet"

    code, _, err = _run(capsys, path, out, "--as-of", pending_time)
    _refused(code, err, f"at or after the pending deltacommit {pending_time}")
    code, _, err = _run(capsys, path, out, "--as-of", shifted(pending_time, 1))
    _refused(code, err, f"pending deltacommit {pending_time}")
    code, before, err = _run(capsys, path, out, "--as-of", writes[-1])
    assert code == 0, err

    rollback(HudiTable.open(Storage(), path), pending)
    assert HudiTable.open(Storage(), path).timeline().get(pending_time) is None
    code, rows, err = _run(capsys, path, out, "--as-of", pending_time)
    assert code == 0, err
    assert rows is not None and before is not None
    assert_same_rows(rows, before, "as of the rolled-back write against the write before it")


# --- incremental bounds ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_incremental_bounds_say_what_they_compare(
    version: int, tmp_path: Path, tables: Callable[[str, int, Path], str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tables("mor", version, tmp_path)
    timeline = HudiTable.open(Storage(), path).timeline()
    writes = list(timeline.completed_writes())
    if version == 6:
        kind, times = "instant (requested) times (table version 6)", [w.requested_time for w in writes]
    else:
        kind, times = "completion times (table version 8+)", [w.completion_time or "" for w in writes]
    start, end = times[0], times[2]
    out = tmp_path / "o.parquet"
    code, rows, err = _run(capsys, path, out, "--start", start, "--end", end)
    assert code == 0, err
    assert [line for line in err.splitlines() if line.startswith("-- incremental")] == [
        f"-- incremental: commits whose {kind} are in ({start}, {end}] (timeline zone UTC)"
    ]
    assert rows is not None
    wanted = {w.requested_time for w, t in zip(writes, times, strict=True) if start < t <= end}
    assert set(rows.column("_hoodie_commit_time").to_pylist()) == wanted
    # Hudi's incremental rows: the snapshot as of the range's last write, rows last written inside the range.
    # (hudi-rs 0.5 differs: it also returns a log record of the range that lost the merge to an older base record
    # by ordering value, which no snapshot holds.)
    code, snapshot, err = _run(capsys, path, out, "--as-of", max(wanted))
    assert code == 0 and snapshot is not None, err
    in_range = pc.is_in(snapshot.column("_hoodie_commit_time"), value_set=pa.array(sorted(wanted)))
    assert_same_rows(rows, snapshot.filter(in_range), "incremental against the snapshot's rows of the range")

    code, _, err = _run(capsys, path, out, "--start", "last week")
    _refused(code, err, "--start 'last week' is not an instant time")
    code, _, err = _run(capsys, path, out, "--end", end)
    _refused(code, err, "--end needs --start")
    code, _, err = _run(capsys, path, out, "--as-of", end, "--start", start)
    _refused(code, err, "--as-of cannot be combined with --start/--end")


@pytest.mark.parametrize("version", VERSIONS)
def test_incremental_reads_refuse_archived_starts_and_cleaned_ranges(
    version: int, tmp_path: Path, tables: Callable[[str, int, Path], str], capsys: pytest.CaptureFixture[str]
) -> None:
    """An incremental read whose start is before archived commits would miss their rows, and one whose range ends
    at a commit the cleaner no longer holds whole would read a partial snapshot: both are refused (exit 2); a range
    inside what the table retains reads what it read before archival."""
    path = tables("cow", version, tmp_path)
    writes = _writes(path)
    out = tmp_path / "o.parquet"
    code, rows_before, err = _run(capsys, path, out, "--start", writes[-2])
    assert code == 0 and rows_before is not None and rows_before.num_rows > 0, err
    policy = ArchivalPolicy.from_mapping({"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3"})
    archived = {i.requested_time for i in archive(HudiTable.open(Storage(), path), policy)}
    assert archived and archived == set(writes) - set(_writes(path))
    start = _writes(path)[0]
    assert writes[-2] >= start  # the read below stays inside the active timeline
    code, _, err = _run(capsys, path, out, "--start", writes[0], "--end", writes[-1])
    _refused(code, err, f"--start {writes[0]} is before the active timeline (it starts at {start})")
    code, rows_after, err = _run(capsys, path, out, "--start", writes[-2])
    assert code == 0 and rows_after is not None, err
    assert_same_rows(rows_after, rows_before, "incremental read inside the active timeline, after archival")

    cleaned = tables("cleanable", version, tmp_path / "c")
    cwrites = _writes(cleaned)
    table, instant, _ = scheduled(cleaned, CleanPolicy.from_mapping(POLICIES["commits"]))
    assert execute_clean(table, instant).total_files_deleted > 0
    first = HudiTable.open(Storage(), cleaned).timeline().completed_writes().instants[0]
    end = first.completion_time if version >= 8 else first.requested_time  # versions 8+ compare completion times
    assert first.requested_time == cwrites[0] and end
    code, _, err = _run(capsys, cleaned, out, "--start", "2000-01-01", "--end", end)
    _refused(code, err, f"ends at commit {cwrites[0]}", "older than the cleaner retains")
