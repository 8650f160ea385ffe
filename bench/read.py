"""Merged snapshot read of a MOR table: tableservice vs hudi-rs vs a bare pyarrow read of the base files.

Usage: python bench/read.py [--records 2000000] [--file-groups 16] [--commits 6] [--log-block avro|parquet|both]

The table: non-partitioned MOR (table version 9), `--records` rows in `--file-groups` base files, then five delta
commits each updating 20% of the rows, as Avro log blocks and (another table) as Parquet log blocks. All three
readers run in this process, one after the other, best of three.
Aim: our merged read takes at most half of hudi-rs's time, with either kind of log block.
"""

from __future__ import annotations

import argparse
import sys

import pyarrow.parquet as pq

from bench.common import bench_dir, peak_rss_mb, standard_mor_table, timed
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import iter_read
from tableservice.storage import Storage


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--file-groups", type=int, default=16)
    parser.add_argument("--commits", type=int, default=6, help="1 insert + 5 delta commits")
    parser.add_argument("--log-block", choices=["avro", "parquet", "both"], default="both")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    kinds = ["avro", "parquet"] if args.log_block == "both" else [args.log_block]
    ok = True
    ratios = {}
    for kind in kinds:
        same, ratios[kind] = run(args, kind)
        ok = ok and same
    for kind, ratio in ratios.items():
        print(f"{kind} log blocks: time ratio tableservice / hudi-rs {ratio:.2f} (aim: <= {AIM})")
    print(f"peak RSS of this process: {peak_rss_mb():.0f} MiB")
    return 0 if ok else 1


AIM = 0.5


def run(args: argparse.Namespace, kind: str) -> tuple[bool, float]:
    path = bench_dir(f"read-{args.records}-{args.file_groups}-{args.commits}-{kind}")
    print(f"{kind} log blocks, table: {path}", flush=True)
    standard_mor_table(
        path,
        records=args.records,
        file_groups=args.file_groups,
        commits=args.commits,
        update_fraction=0.2,
        log_block=kind,
    )

    def ours() -> int:
        table = HudiTable.open(Storage(), str(path))
        return sum(t.num_rows for t in iter_read(table))

    def hudi_rs() -> int:
        from hudi import HudiTableBuilder

        table = HudiTableBuilder.from_base_uri(str(path)).build()
        return sum(b.num_rows for b in table.read())

    def bare() -> int:
        table = HudiTable.open(Storage(), str(path))
        rows = 0
        for base in table.file_system_view().latest_base_files():
            rows += pq.read_table(base.location, use_threads=False).num_rows
        return rows

    results = {}
    for name, fn in (
        ("tableservice merged read", ours),
        ("hudi-rs merged read", hudi_rs),
        ("pyarrow base files only", bare),
    ):
        seconds, rows = timed(fn, args.repeat)
        results[name] = (seconds, rows)
        print(f"  {name:28s} {rows:>10,d} rows  {seconds:7.2f} s  {rows / seconds:>12,.0f} rows/s", flush=True)
    ours_s = results["tableservice merged read"][0]
    rs_s = results["hudi-rs merged read"][0]
    bare_s = results["pyarrow base files only"][0]
    print(f"  time ratio tableservice / hudi-rs: {ours_s / rs_s:.2f} (aim: <= {AIM})")
    print(f"  time ratio tableservice / bare base-file read: {ours_s / bare_s:.2f}")
    same = results["tableservice merged read"][1] == results["hudi-rs merged read"][1]
    print(f"  row counts agree with hudi-rs: {same}", flush=True)
    return same, ours_s / rs_s


if __name__ == "__main__":
    sys.exit(main())
