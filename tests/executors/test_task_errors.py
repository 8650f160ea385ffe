"""A task's typed error reaches the driver as itself (class, table, file, problem), not as Spark's "An exception
was thrown from the Python worker"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tableservice.errors import CorruptFileError, FileMissingError, TableServiceError
from tableservice.executors.spark import short_error
from tableservice.executors.worker import decode_task_error, encode_task_error
from tableservice.service.compaction import execute_compaction
from tests.support.daemon_helpers import with_pending_compaction


def test_typed_errors_survive_the_text_spark_wraps_them_in() -> None:
    original = FileMissingError("log file is gone", table="trips", path="s3://b/t/p/.f_1.log.1_0-1-0")
    wrapped = "An exception was thrown from the Python worker.\nTraceback ...\nRuntimeError: " + encode_task_error(
        original, "fallback"
    )
    typed = decode_task_error(wrapped)
    assert type(typed) is FileMissingError
    assert (typed.problem, typed.table, typed.path) == (original.problem, "trips", original.path)
    assert decode_task_error("Py4JJavaError: something else") is None
    unknown = encode_task_error(CorruptFileError("bad bytes"), "trips").replace("CorruptFileError", "NoSuchError")
    fallback = decode_task_error(unknown)
    assert fallback is not None and not fallback.retryable and fallback.table == "trips"


def test_the_line_kept_from_a_python_worker_error_is_the_exception() -> None:
    text = (
        "An exception was thrown from the Python worker. Please see the stack trace below.\n"
        'Traceback (most recent call last):\n  File "x.py", line 1, in f\n'
        "ZeroDivisionError: division by zero\n"
    )
    assert short_error(Exception(text)) == "ZeroDivisionError: division by zero"


@pytest.mark.spark
def test_a_damaged_base_file_fails_the_compaction_with_the_tasks_typed_error(
    tmp_path: Path, spark_executor: Any
) -> None:
    path, ctx, scheduled = with_pending_compaction(tmp_path / "t", spark_executor, records=200, commits=3)
    table = ctx.table
    op = next(o for o in table.compaction_plan(scheduled).operations or () if o.data_file_path)
    base_file = Path(path) / (op.partition_path or "") / str(op.data_file_path)
    base_file.write_bytes(b"PAR1" + bytes(base_file.stat().st_size - 8) + b"PAR1")  # a footer that is not one
    with pytest.raises(TableServiceError) as err:
        execute_compaction(ctx, scheduled.requested_time)
    assert type(err.value) is CorruptFileError, repr(err.value)
    assert err.value.table == "t"
    assert err.value.path is not None and err.value.path.endswith(base_file.name)
    assert "Python worker" not in str(err.value)
