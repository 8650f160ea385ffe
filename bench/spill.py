"""Bounded-memory compaction: peak RSS of the process merging one file slice of N updated records, with a memory
budget (`hoodie.memory.compaction.max.size`) against the unbounded merge.

The slice is built directly with our writers (fast): a base file of N rows and one log file of Parquet (or Avro)
data blocks updating every record once. Each variant runs in its own subprocess doing what a compaction task does
(`task_reader` + `read_slice` + `write_base_file`); the child reports its peak RSS (VmHWM), its RSS after imports
and its wall time. Aim: peak ≤ budget + a fixed overhead (interpreter and libraries, one base batch, the base
file writer's row-group buffer of 120 MiB).

    python -m bench.spill                       # 5M records, 256 MiB budget, Parquet log blocks
    python -m bench.spill --records 1000000 --budget-mb 64 --log-block avro
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.common import bench_dir, vm_status_kb
from tableservice.hudi.action.compact import slice_at
from tableservice.hudi.file_group.base_file import write_base_file
from tableservice.hudi.file_group.filenames import BaseFileName, LogFileName
from tableservice.hudi.file_group.log_format import HeaderKey, append_log_blocks
from tableservice.hudi.file_group.log_format.writer import encode_avro_data_block, encode_parquet_data_block
from tableservice.hudi.file_group.merge import merge_config_from_properties
from tableservice.hudi.file_group.reader import BlockFilter, FileGroupReader
from tableservice.hudi.table.schema import add_meta_fields, arrow_schema_from_avro, avro_schema_from_arrow
from tableservice.hudi.write.workload import TRIP_SCHEMA
from tableservice.storage import Storage

FILE_ID = "00000000-0000-0000-0000-000000000000-0"
BASE_INSTANT = "20250101000000000"
LOG_INSTANT = "20250102000000000"
OUT_INSTANT = "20250103000000000"
BLOCK_ROWS = 250_000
PROPERTIES = {
    "hoodie.table.name": "bench_spill",
    "hoodie.table.recordkey.fields": "uuid",
    "hoodie.table.ordering.fields": "ts",
    "hoodie.table.precombine.field": "ts",
    "hoodie.record.merge.mode": "EVENT_TIME_ORDERING",
}


def _avro_schema() -> dict[str, Any]:
    return add_meta_fields(avro_schema_from_arrow(TRIP_SCHEMA, "bench_spill_record", "hoodie.bench_spill"))


def _rows(start: int, n: int, ts_base: int, instant: str, file_name: str, schema: pa.Schema) -> pa.Table:
    rng = np.random.default_rng(start + ts_base)
    idx = np.arange(start, start + n)
    keys = pa.array([f"uuid-{i:010d}" for i in idx], pa.string())
    columns: dict[str, Any] = {
        "_hoodie_commit_time": pa.array([instant] * n, pa.string()),
        "_hoodie_commit_seqno": pa.array([f"{instant}_0_{i}" for i in idx], pa.string()),
        "_hoodie_record_key": keys,
        "_hoodie_partition_path": pa.array([""] * n, pa.string()),
        "_hoodie_file_name": pa.array([file_name] * n, pa.string()),
        "uuid": keys,
        "ts": pa.array(ts_base + idx, pa.int64()),
        "rider": pa.array([f"rider-{i % 997}" for i in idx], pa.string()),
        "driver": pa.array([f"driver-{i % 113}" for i in idx], pa.string()),
        "fare": pa.array(rng.uniform(3, 120, n)),
        "tip": pa.array(rng.integers(0, 2500, n) / 100.0).cast(pa.decimal128(10, 2)),
        "passengers": pa.array(rng.integers(1, 5, n), pa.int32()),
        "trip_date": pa.array(np.full(n, 19700), pa.int32()).cast(pa.date32()),
        "is_paid": pa.array(rng.random(n) < 0.9),
        "city": pa.array(["sf"] * n, pa.string()),
    }
    return pa.Table.from_pydict(columns).cast(schema)


def build_slice(root: Path, records: int, log_block: str) -> tuple[str, list[str]]:
    """A base file of `records` rows and one log file updating each of them once (newer `ts`)."""
    marker = root / f".complete-{records}-{log_block}"
    base_name = BaseFileName(FILE_ID, "0-0-0", BASE_INSTANT, ".parquet").name
    log_name = LogFileName(FILE_ID, BASE_INSTANT, 1, "0-0-1").name
    base, log = str(root / base_name), str(root / log_name)
    if marker.exists():
        return base, [log]
    for f in root.glob("*"):
        f.unlink()
    for f in root.glob(".*"):
        f.unlink()
    storage = Storage()
    avro = _avro_schema()
    schema = arrow_schema_from_avro(avro)
    started = time.monotonic()

    def base_batches() -> Any:
        for lo in range(0, records, BLOCK_ROWS):
            yield from _rows(lo, min(BLOCK_ROWS, records - lo), 1_000, BASE_INSTANT, base_name, schema).to_batches()

    write_base_file(storage, base, base_batches(), avro_schema=avro, compression="snappy", file_name=base_name)
    for lo in range(0, records, BLOCK_ROWS):
        rows = _rows(lo, min(BLOCK_ROWS, records - lo), 10**9, LOG_INSTANT, base_name, schema)
        header = {HeaderKey.INSTANT_TIME: LOG_INSTANT}
        block = (
            encode_parquet_data_block(rows, header, compression="snappy", avro_schema=avro)
            if log_block == "parquet"
            else encode_avro_data_block(rows, avro, header)
        )
        append_log_blocks(storage, log, [block])
    marker.touch()
    print(f"  built the slice ({records:,} base rows, {records:,} log records) in {time.monotonic() - started:.0f}s")
    return base, [log]


def _vm(field: str) -> int:
    return vm_status_kb(field) * 1024


def child(base: str, logs: list[str], out: str, budget: int | None) -> None:
    """One compaction task's merge and write, in this process; prints a JSON line of figures."""
    storage = Storage()
    avro = _avro_schema()
    reader = FileGroupReader(
        storage,
        table_name="bench_spill",
        merge_config=merge_config_from_properties(PROPERTIES, 9),
        schema=arrow_schema_from_avro(avro),
        block_filter=BlockFilter(8, frozenset(), None, as_of=OUT_INSTANT),
        memory_budget=budget,
    )
    file_slice = slice_at(storage, "", FILE_ID, BASE_INSTANT, base, logs)
    idle = _vm("VmRSS")
    started = time.monotonic()
    parts = reader.read_slice(file_slice)
    try:
        result = write_base_file(
            storage,
            out,
            (b for part in parts for b in part.to_batches()),
            avro_schema=avro,
            compression="snappy",
            file_name=os.path.basename(out),
        )
    finally:
        parts.close()
    seconds = time.monotonic() - started
    figures = {
        "peak": _vm("VmHWM"),
        "idle": idle,
        "seconds": seconds,
        "rows": result.num_rows,
        "buckets": reader.last_spill.buckets,
        "spilled": reader.last_spill.spilled_bytes,
    }
    print(json.dumps(figures), flush=True)


def _run(base: str, logs: list[str], out: str, budget: int | None) -> dict[str, Any]:
    args = [sys.executable, "-m", "bench.spill", "--child", base, out, json.dumps(budget), *logs]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"variant with budget {budget} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        base, out, budget_json, *logs = sys.argv[2:]
        child(base, logs, out, json.loads(budget_json))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--budget-mb", type=int, default=256)
    parser.add_argument("--log-block", choices=("parquet", "avro"), default="parquet")
    opts = parser.parse_args()
    root = bench_dir(f"spill-{opts.records}-{opts.log_block}")
    root.mkdir(parents=True, exist_ok=True)
    base, logs = build_slice(root, opts.records, opts.log_block)
    budget = opts.budget_mb << 20
    mib = 1 << 20
    out_dir = root / "out"
    out_dir.mkdir(exist_ok=True)
    print(f"file slice: {opts.records:,} base rows, {opts.records:,} updated records ({opts.log_block} log blocks)")
    rows = []
    for label, value in (("no budget", None), (f"budget {opts.budget_mb} MiB", budget)):
        out = str(out_dir / BaseFileName(FILE_ID, "1-0-1", OUT_INSTANT, ".parquet").name)
        figures = _run(base, logs, out, value)
        os.unlink(out)
        rows.append((label, figures))
        print(
            f"  {label:<16} peak RSS {figures['peak'] / mib:7.0f} MiB (after imports {figures['idle'] / mib:4.0f} MiB)"
            f"  {figures['seconds']:6.1f} s  rows {figures['rows']:,}  buckets {figures['buckets']}"
            f"  spilled {figures['spilled'] / mib:,.0f} MiB",
            flush=True,
        )
    bounded = rows[1][1]
    overhead = bounded["peak"] - budget
    print(
        f"aim: peak ≤ budget + fixed overhead; measured peak {bounded['peak'] / mib:.0f} MiB = budget "
        f"{opts.budget_mb} MiB {'+' if overhead >= 0 else '-'} {abs(overhead) / mib:.0f} MiB "
        f"(interpreter and libraries {bounded['idle'] / mib:.0f} MiB, writer row group buffer 120 MiB); "
        f"unbounded peak {rows[0][1]['peak'] / mib:.0f} MiB; time ×{bounded['seconds'] / rows[0][1]['seconds']:.2f}"
    )
    if rows[0][1]["rows"] != bounded["rows"]:
        print(f"ROW COUNTS DIFFER: {rows[0][1]['rows']} vs {bounded['rows']}")


if __name__ == "__main__":
    main()
