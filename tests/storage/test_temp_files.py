"""Temp files of whole-file writes never outlive a failed write, never show in listings or timelines, and stale
ones are swept under the table lock. A full device is a real tmpfs of a few kilobytes (mounted for the test; the
test skips with the reason when mounting is not permitted) and, in every environment, a process whose file-size
limit (RLIMIT_FSIZE) makes writes fail with EFBIG."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tableservice.errors import StorageError, StorageFullError
from tableservice.hudi.file_group.log_format.writer import append_log_blocks
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.storage import STALE_TEMP_AGE_MS, TEMP_PREFIX, Storage
from tests.support.trip_tables import create_trip_table

REPO = Path(__file__).resolve().parents[2]


def _temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(f"{TEMP_PREFIX}*"))


@pytest.fixture
def full_fs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs holding a tiny table, then filled up to the last byte."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()}); the RLIMIT_FSIZE test covers it")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def _fill(folder: Path) -> None:
    with open(folder / "filler", "ab", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 1024)
        except OSError:
            pass


def test_a_full_device_leaves_no_temp_file(full_fs: Path) -> None:
    storage = Storage()
    base = str(full_fs / "t")
    create_trip_table(base, 9, TableType.MERGE_ON_READ, storage=storage)
    table = HudiTable.open(storage, base)
    timeline_folder = full_fs / "t" / ".hoodie" / "timeline"
    _fill(full_fs)
    plan = os.urandom(8192)
    for attempt in range(3):  # each attempt used to leave one `.tmp-*` behind
        with pytest.raises(StorageFullError) as err:
            table.active.create_requested(f"2026010100000000{attempt}", Action.CLEAN, plan)
        target = str(timeline_folder / f"2026010100000000{attempt}.clean.requested")
        assert err.value.path == target
        assert err.value.retryable
        assert str(err.value) == f"write failed: No space left on device (ENOSPC) | file={target}"
        with pytest.raises(StorageFullError):
            storage.write_bytes(str(full_fs / "t" / "x" / "f.bin"), plan)
    assert _temp_files(full_fs) == []
    assert not (timeline_folder / "20260101000000000.clean.requested").exists()
    # A log append that runs out of space is cut back to the bytes the file held.
    log = full_fs / "t" / "log"
    os.remove(full_fs / "filler")
    append_log_blocks(storage, str(log), [b"#HUDI#" + b"a" * 100])
    _fill(full_fs)
    with pytest.raises(StorageFullError) as err:
        append_log_blocks(storage, str(log), [b"#HUDI#" + b"b" * 20000])
    assert "No space left on device (ENOSPC)" in str(err.value)
    assert log.read_bytes() == b"#HUDI#" + b"a" * 100


_EFBIG_SCRIPT = """
import json, os, resource, signal, sys
from tableservice.storage import Storage
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
folder = sys.argv[1]
out = []
for call in ("write_bytes", "create_if_absent"):
    try:
        getattr(Storage(), call)(os.path.join(folder, call + ".bin"), b"x" * 20000)
        out.append(["no error", ""])
    except Exception as e:
        out.append([type(e).__name__, str(e)])
print(json.dumps(out))
"""


def test_a_write_over_the_file_size_limit_leaves_no_temp_file(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", _EFBIG_SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert results == [
        ["StorageError", f"write failed: File too large (EFBIG) | file={tmp_path}/write_bytes.bin"],
        ["StorageError", f"write failed: File too large (EFBIG) | file={tmp_path}/create_if_absent.bin"],
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_interrupts_and_rename_failures_remove_the_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = Storage()
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "inside").write_bytes(b"keep")
    with pytest.raises(StorageError) as err:  # the rename fails: a folder holds the name
        storage.write_bytes(str(tmp_path / "dir"), b"data")
    assert err.value.path == str(tmp_path / "dir") and "(EISDIR)" in err.value.problem
    assert _temp_files(tmp_path) == []

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    for call in (storage.write_bytes, storage.create_if_absent):
        with pytest.raises(KeyboardInterrupt):
            call(str(tmp_path / "f.bin"), b"data")
    assert _temp_files(tmp_path) == []
    assert not (tmp_path / "f.bin").exists()


def test_temp_files_are_not_instants_and_stale_ones_are_swept(tmp_path: Path) -> None:
    storage = Storage()
    base = str(tmp_path / "t")
    create_trip_table(base, 9, TableType.MERGE_ON_READ, storage=storage)
    table = HudiTable.open(storage, base)
    timeline = tmp_path / "t" / ".hoodie" / "timeline"
    partition = tmp_path / "t" / "city=x"
    partition.mkdir()
    (partition / ".hoodie_partition_metadata").write_bytes(b"")
    before = list(table.reload())
    # What a killed process leaves: temp files named like instants and data files would be.
    old = timeline / f"{TEMP_PREFIX}20260101000000000.commit.requested"
    fresh = timeline / f"{TEMP_PREFIX}abc"
    data = partition / f"{TEMP_PREFIX}f1-0_0-1-1_20260101000000000.parquet"
    for p in (old, fresh, data):
        p.write_bytes(b"partial")
    stale = time.time() - STALE_TEMP_AGE_MS / 1000 - 60
    os.utime(old, (stale, stale))
    assert list(table.reload()) == before
    assert [fi.name for fi in storage.list(str(partition))] == [".hoodie_partition_metadata"]
    assert [fi.name for fi in table.list_storage_files()["city=x"]] == [".hoodie_partition_metadata"]
    assert sorted(fi.name for fi in storage.list(str(timeline), temp_files=True) if fi.name.startswith(TEMP_PREFIX))
    # Scheduling (under the table lock) sweeps the old one and keeps the one a running write may own.
    assert table.request(Action.CLEAN, _no_plan, lambda plan: b"", lock=_no_lock) is None
    assert _temp_files(timeline) == [fresh.name]
    assert data.exists()


def _no_plan(instant_time: str, timeline: object) -> bytes | None:
    return None


class _no_lock:
    def __enter__(self) -> object:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
