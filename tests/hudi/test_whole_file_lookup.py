"""A merge that looks a whole base file's record keys up among the log's at once merges the same rows, in the same
order, as one that looks each batch's keys up as it goes; and it engages only where it pays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tableservice.hudi.action.compact import task_reader
from tableservice.hudi.file_group import merge as merge_module
from tableservice.hudi.file_group import reader as reader_module
from tableservice.storage import Storage
from tests.support.late_updates import compaction_task, late_update_table, merged_slices


@pytest.mark.parametrize(("version", "log_block"), [(9, "parquet"), (6, "avro")])
def test_one_lookup_of_a_files_keys_merges_what_per_batch_lookups_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int, log_block: str
) -> None:
    base = late_update_table(tmp_path / "t", version, log_block)  # late updates, ties, deletes, re-inserts, new keys
    storage = Storage()
    calls: list[tuple[int, bool]] = []  # (batch rows, positions given)
    real = merge_module.merge_base_batch

    def watched(batch: Any, delta: Any, **kwargs: Any) -> pa.Table:
        calls.append((batch.num_rows, kwargs.get("position") is not None))
        return real(batch, delta, **kwargs)

    monkeypatch.setattr(reader_module, "merge_base_batch", watched)
    for i, file_slice in enumerate(merged_slices(base)[:2]):  # the two slices with a base file
        reader = task_reader(storage, compaction_task(base, file_slice, None, f"{i}-0-1"))
        reader.batch_rows = 16  # several batches (the base files hold 60 and 400 rows)
        calls.clear()
        at_once = pa.concat_tables(list(reader.read_slice(file_slice)))
        assert len(calls) > 1 and all(given for _, given in calls)
        monkeypatch.setattr(reader_module, "WHOLE_FILE_LOOKUP_ROWS", 0)  # every batch looked up on its own
        calls.clear()
        per_batch = pa.concat_tables(list(reader.read_slice(file_slice)))
        assert len(calls) > 1 and not any(given for _, given in calls)
        monkeypatch.undo()
        monkeypatch.setattr(reader_module, "merge_base_batch", watched)
        assert at_once.num_rows > 0
        assert at_once.to_pylist() == per_batch.to_pylist()  # same rows, same order
        reader.batch_rows = 1 << 20  # the file in one batch: nothing to gain, its keys are not read apart
        calls.clear()
        whole = pa.concat_tables(list(reader.read_slice(file_slice)))
        assert calls and not any(given for _, given in calls)
        # replaced rows follow each batch's unchanged ones: one batch orders them otherwise, with the same rows
        assert whole.sort_by("_hoodie_record_key").to_pylist() == per_batch.sort_by("_hoodie_record_key").to_pylist()


def test_positions_of_the_wrong_length_are_refused(tmp_path: Path) -> None:
    base = late_update_table(tmp_path / "t", 9, "parquet")
    file_slice = merged_slices(base)[0]
    reader = task_reader(Storage(), compaction_task(base, file_slice, None, "0-0-1"))
    delta = reader.delta_records(file_slice)
    assert file_slice.base_file is not None
    batch = next(reader.iter_base(file_slice.base_file))
    with pytest.raises(ValueError, match=f"3 key positions given for a base batch of {batch.num_rows} rows"):
        merge_module.merge_base_batch(batch, delta, position=np.zeros(3, dtype=np.int64))
