"""Bounded-memory compaction: a slice whose log records exceed a tiny budget spills to local dirs and writes the
same rows as the unbounded merge; spill files never outlive the merge."""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tableservice.hudi.action.compact import CompactionTask, run_compaction_task, task_reader
from tableservice.hudi.file_group.merge import merge_base_batch
from tableservice.hudi.file_group.records_read import counting_records
from tableservice.hudi.file_group.spill import (
    DEFAULT_MAX_MEMORY,
    MIN_MEMORY,
    SpillStats,
    compaction_memory_budget,
    key_buckets,
    read_frames,
    spark_bytes,
    spill_directories,
    write_frame,
)
from tableservice.storage import Storage
from tests.support.late_updates import compaction_task, late_update_table, merged_slices

BUDGET = 8 * 1024  # bytes: every slice below spills


def _written(base: str, task: CompactionTask) -> pa.Table:
    location = os.path.join(base, task.partition_path, task.new_file_name)
    return pq.read_table(location).drop_columns(["_hoodie_file_name"])


def _by_key(table: pa.Table) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = table.sort_by("_hoodie_record_key").to_pylist()
    return rows


@pytest.mark.parametrize(("version", "log_block"), [(8, "avro"), (8, "parquet"), (6, "avro")])
def test_tiny_budget_writes_the_rows_of_the_unbounded_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int, log_block: str
) -> None:
    spill_root = tmp_path / "local"
    spill_root.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{tmp_path / 'absent'},{spill_root}")
    base = late_update_table(tmp_path / "t", version, log_block)
    storage = Storage()
    rows: dict[str, dict[str, Any]] = {}
    for i, file_slice in enumerate(merged_slices(base)):
        unbounded = compaction_task(base, file_slice, None, f"{i}-0-1")
        bounded = compaction_task(base, file_slice, BUDGET, f"{i}-0-2")
        run_compaction_task(storage, unbounded)
        stat = run_compaction_task(storage, bounded)
        expected, got = _written(base, unbounded), _written(base, bounded)
        assert _by_key(got) == _by_key(expected)
        assert stat.num_writes == got.num_rows and got.num_rows > 0
        assert list(spill_root.iterdir()) == []  # the merge's spill folder is gone
        reader = task_reader(storage, bounded)
        with counting_records() as bounded_count:
            merged = pa.concat_tables(list(reader.read_slice(file_slice)))
        with counting_records() as unbounded_count:
            plain = task_reader(storage, unbounded)
            list(plain.read_slice(file_slice))
        # records read: every base row and every log record the scan kept, whichever path merged them
        base_rows = pq.ParquetFile(file_slice.base_file.location).metadata.num_rows if file_slice.base_file else 0
        assert bounded_count.records == unbounded_count.records == base_rows + plain.last_stats.log_records
        assert plain.last_stats.log_records == reader.last_stats.log_records > 0
        assert reader.last_spill.buckets > 1 and reader.last_spill.spilled_bytes > 0
        assert plain.last_spill == SpillStats()
        if file_slice.base_file is not None:  # the figures are the last read's: a slice without logs spills nothing
            list(reader.read_slice(replace(file_slice, log_files=())))
            assert reader.last_spill == SpillStats()
        assert _by_key(merged.drop_columns(["_hoodie_file_name"])) == _by_key(got)
        if file_slice.base_file is not None:
            # base rows keep the base file's order; the log's inserts (none here) would follow
            base_order = pq.read_table(file_slice.base_file.location).column("_hoodie_record_key").to_pylist()
            got_keys = got.column("_hoodie_record_key").to_pylist()
            assert got_keys == [k for k in base_order if k in set(got_keys)]
            rows.update({r["_hoodie_record_key"]: r for r in got.to_pylist()})
    # the cases the table was built with came out as the merge rules say
    assert rows["k0010"]["rider"] == "u1-k0010"  # newer ordering value
    assert rows["k0080"]["rider"] == "base-k0080"  # late update: the base wins
    assert rows["k0120"]["rider"] == "tie-k0120"  # tie: the later record wins
    assert rows["k0305"]["rider"] == "u3-k0305"  # deleted, then written again
    assert "k0315" not in rows  # deleted with a larger ordering value
    assert rows["k0335"]["rider"] == "base-k0335"  # the delete's ordering value lost
    assert "k0395" not in rows
    assert rows["n040"]["rider"] == "tie2-n040" and rows["n025"]["rider"] == "u3-n025"  # tie; higher value


def test_spill_files_are_removed_after_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spill_root = tmp_path / "local"
    spill_root.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(spill_root))
    base = late_update_table(tmp_path / "t", 8, "avro")
    task = compaction_task(base, merged_slices(base)[0], BUDGET, "3-0-1")
    calls: list[int] = []
    real = merge_base_batch

    def failing(*args: Any, **kwargs: Any) -> pa.Table:
        calls.append(1)
        if len(calls) == 2:
            assert len(list(spill_root.iterdir())) == 1  # the merge's folder exists while it runs
            raise OSError("injected failure")
        return real(*args, **kwargs)

    monkeypatch.setattr("tableservice.hudi.file_group.spill_merge.merge_base_batch", failing)
    with pytest.raises(OSError, match="injected failure"):
        run_compaction_task(Storage(), task)
    assert len(calls) == 2
    assert list(spill_root.iterdir()) == []
    assert not os.path.exists(os.path.join(base, task.partition_path, task.new_file_name))


def test_an_abandoned_read_removes_its_spill_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spill_root = tmp_path / "local"
    spill_root.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(spill_root))
    base = late_update_table(tmp_path / "t", 8, "parquet")
    file_slice = merged_slices(base)[0]
    task = compaction_task(base, file_slice, BUDGET, "4-0-1")
    reader = task_reader(Storage(), task)
    reader.batch_rows = 64
    parts = reader.read_slice(file_slice)
    first = next(parts)
    assert first.num_rows > 0 and len(list(spill_root.iterdir())) == 1
    parts.close()
    assert list(spill_root.iterdir()) == []


def test_budget_follows_hudis_spillable_map_rules() -> None:
    assert compaction_memory_budget(12345, 0.6, {"spark.executor.memory": "8g"}) == 12345
    assert compaction_memory_budget(None, 0.6, None) == DEFAULT_MAX_MEMORY
    # 8 GiB × (1 - 0.6) / (4 cores / 1 cpu per task) × 0.5
    eight = 8 << 30
    conf = {"spark.executor.memory": "8g", "spark.executor.cores": "4"}
    assert compaction_memory_budget(None, 0.5, conf) == int(eight * 0.4 / 4 * 0.5)
    conf2 = {**conf, "spark.task.cpus": "2", "spark.memory.fraction": "0.5"}
    assert compaction_memory_budget(None, 0.6, conf2) == int(eight * 0.5 / 2 * 0.6)
    assert compaction_memory_budget(None, 0.6, {"spark.executor.memory": "300m"}) == MIN_MEMORY  # the floor
    assert compaction_memory_budget(None, 0.6, {"spark.master": "local[2]"}) == DEFAULT_MAX_MEMORY
    assert spark_bytes("512m") == 512 << 20 and spark_bytes("1024") == 1024 and spark_bytes("2G") == 2 << 30
    with pytest.raises(ValueError, match="not a Spark memory size"):
        spark_bytes("lots")


def test_spill_directories_and_frames(tmp_path: Path) -> None:
    assert spill_directories({"SPARK_LOCAL_DIRS": " /a, /b ,"}) == ("/a", "/b")
    assert spill_directories({}) == (tempfile.gettempdir(),)
    path = tmp_path / "run"
    one = pa.table({"a": [1, 2]})
    two = pa.table({"b": ["x"]})
    with open(path, "wb") as f:
        write_frame(f, one, {"kind": "data"})
        write_frame(f, two)
    with open(path, "rb") as f:
        frames = list(read_frames(f))
    assert [t.to_pylist() for t in frames] == [one.to_pylist(), two.to_pylist()]
    assert (frames[0].schema.metadata or {})[b"kind"] == b"data"


def test_key_buckets_depend_on_the_key_only() -> None:
    keys = [f"key-{i}" for i in range(5000)] + ["", "é", "k" * 300]
    whole = key_buckets(pa.array(keys), 16)
    sliced = key_buckets(pa.chunked_array([pa.array(keys[:7]), pa.array(keys)[7:]]), 16)
    large = key_buckets(pa.array(keys, pa.large_string()).dictionary_encode(), 16)
    assert whole.tolist() == sliced.tolist() == large.tolist()
    counts = np.bincount(whole, minlength=16)
    assert counts.min() > 200 and counts.max() < 450  # spread evenly (5003 keys over 16 buckets)
    assert set(key_buckets(pa.array(keys), 1).tolist()) == {0}


def test_bucket_count_stays_under_the_open_file_limit() -> None:
    """A bucketed merge holds one file per bucket open: at most a quarter of the open-file limit."""
    import resource

    from tableservice.hudi.file_group.spill_merge import MAX_BUCKETS, max_buckets

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
        assert max_buckets() == 256
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 1_000_000), hard))
        assert max_buckets() == min(MAX_BUCKETS, min(hard, 1_000_000) // 4)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
