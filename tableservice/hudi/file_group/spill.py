"""Spilling for bounded-memory merges: the memory budget (Hudi's spillable-map keys), the local directories spill
files go to, framed Arrow IPC runs and the bucket hash of record keys. The merge that uses them is
`spill_merge.read_slice_bounded`.

Budget semantics follow Hudi's `IOUtils.getMaxMemoryPerCompaction`:
- `hoodie.memory.compaction.max.size` (bytes), when set, is the budget.
- Otherwise, when `spark.executor.memory` is set, `hoodie.memory.compaction.fraction` (0.6) of the executor's
  user memory per task: `spark.executor.memory × (1 - spark.memory.fraction) / (spark.executor.cores /
  spark.task.cpus)`, at least 100 MiB (Spark's memory strings without a unit are bytes).
- Otherwise 1 GiB, Hudi's budget without engine properties. (Hudi on Spark reads an unset
  `spark.executor.memory` as the string "1024", i.e. 1024 bytes, and lands on the 100 MiB floor; with a local
  master that setting does not size anything, so the no-engine default is taken instead.)

Spill files live in a private folder under the executor's local directories (`SPARK_LOCAL_DIRS`, which Spark
sets for its Python workers; else the system temp dir), removed on every exit path.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import struct
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import BinaryIO

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from tableservice.hudi.file_group.merge_core import combined

MAX_MEMORY_FOR_COMPACTION = "hoodie.memory.compaction.max.size"
MAX_MEMORY_FRACTION_FOR_COMPACTION = "hoodie.memory.compaction.fraction"
DEFAULT_MEMORY_FRACTION = 0.6
DEFAULT_MAX_MEMORY = 1 << 30  # Hudi's budget when no engine properties are known
MIN_MEMORY = 100 << 20  # Hudi's floor of a fraction-derived budget
SPILL_PREFIX = "tableservice-spill-"

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "p": 1 << 50, "pb": 1 << 50}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")
_FRAME = struct.Struct("<Q")
_IPC = pa.ipc.IpcWriteOptions(compression="lz4")


@dataclass(frozen=True)
class SpillStats:
    """What a bounded merge spilled: the number of key buckets (0: it stayed in memory) and the bytes written."""

    buckets: int = 0
    spilled_bytes: int = 0


def spark_bytes(text: str) -> int:
    """A Spark memory string ("4g", "512m", "1024") in bytes; no unit means bytes (Spark's `byteStringAsBytes`)."""
    match = _SIZE.match(text)
    if match is None or match.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r} is not a Spark memory size")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def compaction_memory_budget(
    max_size: int | None, fraction: float = DEFAULT_MEMORY_FRACTION, spark_conf: Mapping[str, str] | None = None
) -> int:
    """The memory budget (bytes) of one compaction task, as Hudi's `IOUtils.getMaxMemoryPerCompaction`."""
    if max_size is not None:
        return max_size
    if spark_conf is None or "spark.executor.memory" not in spark_conf:
        return DEFAULT_MAX_MEMORY
    executor_memory = spark_bytes(spark_conf["spark.executor.memory"])
    memory_fraction = float(spark_conf.get("spark.memory.fraction", "0.6"))
    cores = int(spark_conf.get("spark.executor.cores", "1"))
    task_cpus = int(spark_conf.get("spark.task.cpus", "1"))
    tasks = max(1, cores // max(1, task_cpus))
    user = executor_memory * (1 - memory_fraction) / tasks
    return max(MIN_MEMORY, math.floor(user * fraction))


def spill_directories(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Where spill files may go: the executor's local directories (`SPARK_LOCAL_DIRS`, comma-separated), else the
    system temp dir."""
    environ = os.environ if env is None else env
    dirs = tuple(d.strip() for d in environ.get("SPARK_LOCAL_DIRS", "").split(",") if d.strip())
    return dirs or (tempfile.gettempdir(),)


class SpillSpace:
    """A private folder for one merge's spill files (a context manager: the folder and everything in it is
    removed on exit, error or not). Of several local directories the one with the most free space is used."""

    def __init__(self, directories: tuple[str, ...] = ()) -> None:
        candidates = [d for d in (directories or spill_directories()) if os.path.isdir(d)]
        if not candidates:
            candidates = [tempfile.gettempdir()]
        parent = max(candidates, key=lambda d: shutil.disk_usage(d).free)
        self.path = tempfile.mkdtemp(prefix=SPILL_PREFIX, dir=parent)
        self._files: list[BinaryIO] = []

    def create(self, name: str) -> BinaryIO:
        f = open(os.path.join(self.path, name), "wb")  # noqa: SIM115 - closed by `close` or `cleanup`
        self._files.append(f)
        return f

    def open(self, name: str) -> BinaryIO:
        f = open(os.path.join(self.path, name), "rb")  # noqa: SIM115 - closed by the caller or `cleanup`
        self._files.append(f)
        return f

    def cleanup(self) -> None:
        for f in self._files:
            f.close()
        self._files.clear()
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> SpillSpace:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()


def write_frame(sink: BinaryIO, table: pa.Table, metadata: Mapping[str, str] | None = None) -> int:
    """Append one table to a run file as a length-prefixed Arrow IPC stream (LZ4); returns the bytes written.
    Every frame carries its own schema, so frames of one run may differ in columns."""
    if metadata:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
    out = pa.BufferOutputStream()
    with pa.ipc.new_stream(out, table.schema, options=_IPC) as writer:
        writer.write_table(table)
    data = out.getvalue()
    sink.write(_FRAME.pack(data.size))
    sink.write(data)
    return _FRAME.size + int(data.size)


def read_frames(source: BinaryIO) -> Iterator[pa.Table]:
    """The frames of a run file, in the order they were written."""
    while True:
        head = source.read(_FRAME.size)
        if not head:
            return
        if len(head) != _FRAME.size:
            raise OSError("spill run file is truncated")
        (size,) = _FRAME.unpack(head)
        data = source.read(size)
        if len(data) != size:
            raise OSError("spill run file is truncated")
        yield pa.ipc.open_stream(pa.py_buffer(data)).read_all()


# --- bucket hash ---------------------------------------------------------------------------------------------

_P = np.uint64(0x100000001B3)  # odd: invertible modulo 2**64
_P_INV = np.uint64(pow(0x100000001B3, -1, 1 << 64))
_HASH_CHUNK = 1 << 16


def key_buckets(keys: pa.Array | pa.ChunkedArray, buckets: int) -> npt.NDArray[np.int64]:
    """Bucket (0..buckets-1) of each record key: a polynomial hash of the key's UTF-8 bytes, mixed. Equal keys go
    to equal buckets whatever array they come in (the hash reads only the key's bytes)."""
    array = combined(keys)
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    if not pa.types.is_large_string(array.type):
        array = array.cast(pa.large_string())
    n = len(array)
    out = np.empty(n, dtype=np.int64)
    if buckets <= 1:
        out[:] = 0
        return out
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64, count=n + 1, offset=array.offset * 8)
    buffer = array.buffers()[2]
    data = np.frombuffer(buffer, dtype=np.uint8) if buffer is not None else np.zeros(0, np.uint8)
    with np.errstate(over="ignore"):
        for lo in range(0, n, _HASH_CHUNK):
            hi = min(n, lo + _HASH_CHUNK)
            start, end = int(offsets[lo]), int(offsets[hi])
            rel = (offsets[lo : hi + 1] - start).astype(np.int64)
            span = end - start
            powers = np.empty(span + 1, dtype=np.uint64)
            powers[0] = 1
            if span:
                powers[1:] = np.cumprod(np.full(span, _P, dtype=np.uint64))
            inverse = np.empty(span + 1, dtype=np.uint64)
            inverse[0] = 1
            if span:
                inverse[1:] = np.cumprod(np.full(span, _P_INV, dtype=np.uint64))
            prefix = np.zeros(span + 1, dtype=np.uint64)
            if span:
                prefix[1:] = np.cumsum(data[start:end].astype(np.uint64) * powers[:span])
            h = (prefix[rel[1:]] - prefix[rel[:-1]]) * inverse[rel[:-1]]
            h ^= (rel[1:] - rel[:-1]).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
            h ^= h >> np.uint64(31)
            h *= np.uint64(0xBF58476D1CE4E5B9)
            h ^= h >> np.uint64(29)
            out[lo:hi] = (h % np.uint64(buckets)).astype(np.int64)
    return out
