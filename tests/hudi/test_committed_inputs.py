"""Committed data is complete before it is rewritten: every real table passes the check as Hudi left it, and each
kind of damage the fault run found (truncated, emptied, spliced log files; a missing or resized base file) is
refused with the file and the instant that committed it, while a torn tail beyond every committed byte is not."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tableservice.errors import DamagedInputError
from tableservice.hudi.action.committed_inputs import CommittedFiles, check_committed_inputs
from tableservice.hudi.action.tasks import CompactionInput
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import read
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table
from tests.support.fixtures import fixture_names, fixture_table_readonly
from tests.support.instant_times import shifted
from tests.support.oracle import sort_rows


def _slices(table: HudiTable) -> list[tuple[str, CompactionInput]]:
    timeline = table.timeline()
    view = table.file_system_view(timeline=timeline, listing=table.list_storage_files())
    return [(s.partition_path, CompactionInput.of(s)) for s in view.latest_merged_slices()]


def _check(path: str) -> None:
    table = HudiTable.open(Storage(), path)
    check_committed_inputs(table, table.timeline(), _slices(table))


@pytest.mark.parametrize("name", fixture_names())
def test_real_tables_pass_as_hudi_left_them(name: str) -> None:
    """No false alarm on Spark-written tables (v6 appends with log offsets, v8/v9 one log file per commit)."""
    path = fixture_table_readonly(name)
    table = HudiTable.open(Storage(), str(path))
    committed = CommittedFiles.of(table, table.timeline())
    check_committed_inputs(table, table.timeline(), _slices(table), committed=committed)
    # the check looked at something: every base file it knows has a recorded size equal to the file's
    for rel, (size, _t) in committed.base_files.items():
        file = path / rel
        if file.exists() and size is not None:
            assert file.stat().st_size == size, rel


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("committed")
    return {v: Path(mor_table(root / f"v{v}", version=v, records=200, commits=4, seed=3)) for v in (6, 9)}


def _copy(template: dict[int, Path], version: int, tmp_path: Path) -> Path:
    dest = tmp_path / f"t{version}"
    shutil.copytree(template[version], dest)
    return dest


def _a_committed_log(path: Path) -> tuple[Path, str, int, int]:
    """A log file of a latest slice with a committed range: (file, committing instant, range start, range end)."""
    table = HudiTable.open(Storage(), str(path))
    committed = CommittedFiles.of(table, table.timeline())
    for _partition, s in _slices(table):
        for location in s.log_files:
            rel = location[len(table.base_path.rstrip("/")) + 1 :]
            ranges = committed.log_ranges.get(rel)
            if ranges:
                r = max(ranges, key=lambda r: r.end)
                return path / rel, r.instant_time, r.start, r.end
    raise AssertionError("no committed log file in the latest slices")


def _a_base_file(path: Path) -> tuple[Path, str]:
    table = HudiTable.open(Storage(), str(path))
    committed = CommittedFiles.of(table, table.timeline())
    for _partition, s in _slices(table):
        if s.base_file is not None:
            rel = s.base_file[len(table.base_path.rstrip("/")) + 1 :]
            return path / rel, committed.base_files[rel][1]
    raise AssertionError("no base file in the latest slices")


def _refused(path: Path, file: Path, instant: str, words: str) -> None:
    with pytest.raises(DamagedInputError) as info:
        _check(str(path))
    error = info.value
    assert error.instant_time == instant
    assert error.path is not None and error.path.endswith(file.name)
    assert file.name in str(error) and instant in str(error) and words in str(error)
    assert error.table == HudiTable.open(Storage(), str(path)).name


@pytest.mark.parametrize("version", [6, 9])
def test_damaged_log_files_are_refused(template: dict[int, Path], tmp_path: Path, version: int) -> None:
    path = _copy(template, version, tmp_path)
    _check(str(path))  # intact
    log, instant, start, end = _a_committed_log(path)
    original = log.read_bytes()
    assert len(original) >= end > start

    log.write_bytes(original[: end - 7])  # truncated
    _refused(path, log, instant, f"holds {end - 7} bytes")

    log.write_bytes(b"")  # zero-length
    _refused(path, log, instant, "holds 0 bytes")

    middle = (start + end) // 2  # bytes inserted inside a committed block
    log.write_bytes(original[:middle] + b"\x00garbage\x01" + original[middle:])
    _refused(path, log, instant, "corrupt block")

    log.write_bytes(original)
    _check(str(path))


@pytest.mark.parametrize("version", [6, 9])
def test_torn_tail_beyond_committed_bytes_is_fine_and_reads_the_same(
    template: dict[int, Path], tmp_path: Path, version: int
) -> None:
    path = _copy(template, version, tmp_path)
    before = sort_rows(read(HudiTable.open(Storage(), str(path))))
    log, _instant, _start, end = _a_committed_log(path)
    with log.open("ab") as f:  # what a failed writer leaves: the start of a block, cut short
        f.write(b"#HUDI#\x00\x00\x00\x00\x00\x00\x10\x00torn")
    assert log.stat().st_size > end
    _check(str(path))
    after = sort_rows(read(HudiTable.open(Storage(), str(path))))
    assert after.equals(before)


@pytest.mark.parametrize("version", [6, 9])
def test_missing_or_resized_base_file_is_refused(template: dict[int, Path], tmp_path: Path, version: int) -> None:
    path = _copy(template, version, tmp_path)
    base, instant = _a_base_file(path)
    original = base.read_bytes()

    base.write_bytes(original + b"\x00" * 10)
    _refused(path, base, instant, f"holds {len(original) + 10} bytes")

    base.unlink()  # the slice falls back to an older base file or to its logs alone
    _refused(path, base, instant, "is missing")

    base.write_bytes(original)
    _check(str(path))


def test_a_write_completed_after_the_plan_is_not_what_the_plan_had_to_see(
    template: dict[int, Path], tmp_path: Path
) -> None:
    """Table version 9 (completion times): a write requested before the plan but completed after it may have written
    a base file the plan could not see; the check reads only what completed before the plan's instant."""
    path = _copy(template, 9, tmp_path)
    table = HudiTable.open(Storage(), str(path))
    timeline = table.timeline()
    last = timeline.completed_writes().instants[-1]
    assert last.completion_time is not None and last.requested_time < last.completion_time
    written = {s.path for stats in (table.commit_metadata(last).partition_to_write_stats or {}).values() for s in stats}
    assert written  # the write wrote files: the checks below compare something
    between = shifted(last.completion_time, -1)  # after the write was requested, before it completed
    assert last.requested_time < between < last.completion_time
    seen_before = CommittedFiles.of(table, timeline, before=between)
    seen_after = CommittedFiles.of(table, timeline, before=last.completion_time + "1")
    assert not written & (set(seen_before.base_files) | set(seen_before.log_ranges))
    assert written <= set(seen_after.base_files) | set(seen_after.log_ranges)
