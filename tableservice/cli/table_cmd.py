"""`tableservice table show|read|verify`: look at a Hudi table the way the daemon sees it."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tableservice.cli.table_health import health_summary, print_health
from tableservice.errors import InvalidTimeTravelError
from tableservice.hudi.file_group.merge import merge_config_from_properties
from tableservice.hudi.metadata.verify import verify_metadata_table
from tableservice.hudi.table.fs_view import FileGroup
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import ReadOptions, compares_completion_times, iter_read, read_schema
from tableservice.hudi.table.time_travel import (
    FORMATS_TEXT,
    check_as_of,
    check_incremental,
    parse_query_time,
    timeline_zone_label,
)
from tableservice.hudi.timeline.instant import Instant
from tableservice.storage import Storage


def register(sub: Any) -> None:
    table = sub.add_parser("table", help="inspect a Hudi table")
    tsub = table.add_subparsers(dest="table_command", required=True)
    show = tsub.add_parser("show", help="configuration, timeline, partitions, file groups and slices")
    show.add_argument("uri", help="table base path (local path or s3:// URI)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=cmd_show)
    rd = tsub.add_parser("read", help="read the table (merged snapshot by default)")
    rd.add_argument("uri")
    rd.add_argument(
        "--as-of",
        metavar="TIME",
        help="time travel: the snapshot holding the writes completed at or before TIME. TIME is one of "
        f"{FORMATS_TEXT}; date-times are wall-clock times on the table's timeline zone "
        "(hoodie.table.timeline.timezone: UTC or LOCAL). Refused (exit 2) when the snapshot is not held whole: "
        "before the first commit, archived, older than the cleaner retains, or at or after a pending write",
    )
    rd.add_argument("--read-optimized", action="store_true", help="base files only (merge-on-read tables)")
    rd.add_argument("--columns", help="comma-separated column names")
    rd.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="keep partitions whose field equals the value (repeatable)",
    )
    rd.add_argument(
        "--start",
        metavar="TIME",
        help="incremental read: the rows written by commits after TIME (exclusive), in the --as-of formats. "
        "Table version 6 compares the bounds with instant (requested) times, versions 8 and 9 with completion "
        "times (Hudi 1.x); the read says which on stderr",
    )
    rd.add_argument("--end", metavar="TIME", help="incremental read: ... up to TIME (inclusive; default: the latest)")
    rd.add_argument("--out", help="write the rows to this Parquet file instead of printing them")
    rd.add_argument("--limit", type=int, default=20, help="rows to print (default 20)")
    rd.set_defaults(handler=cmd_read)
    vf = tsub.add_parser(
        "verify",
        help="rebuild what the metadata table should hold from storage and the timeline, print the differences "
        "(exit 1 when there are any)",
    )
    vf.add_argument("uri")
    vf.add_argument("--json", action="store_true", help="print JSON")
    vf.set_defaults(handler=cmd_verify)


def _instant_json(i: Instant) -> dict[str, Any]:
    return {
        "requested_time": i.requested_time,
        "action": i.action.value,
        "state": i.state.name,
        "completion_time": i.completion_time,
    }


def describe(table: HudiTable) -> dict[str, Any]:
    """Everything `table show` prints, as plain data."""
    config = table.config
    timeline = table.timeline()
    view = table.file_system_view(timeline=timeline)
    inputs = view.inputs
    merge = merge_config_from_properties(config.properties, config.version)
    partitions = []
    for partition in view.partitions():
        groups: list[FileGroup] = view.all_file_groups(partition)
        partitions.append(
            {
                "partition": partition,
                "file_groups": [
                    {
                        "file_id": g.file_id,
                        "replaced_by": inputs.replaced.get(g.id),
                        "pending_compaction": inputs.pending_compaction.get(g.id),
                        "pending_clustering": inputs.pending_clustering.get(g.id),
                        "slices": [
                            {
                                "base_instant_time": s.base_instant_time,
                                "base_file": s.base_file.file_name if s.base_file else None,
                                "base_file_size": s.base_file.size if s.base_file else 0,
                                "log_files": [lf.file_name for lf in s.log_files],
                                "log_file_count": len(s.log_files),
                                "log_files_size": s.log_size,
                            }
                            for s in g.slices
                        ],
                    }
                    for g in groups
                ],
            }
        )
    pending = timeline.pending()
    return {
        "table": {
            "name": config.name,
            "database": config.database,
            "base_path": table.base_path,
            "table_type": config.table_type.value,
            "table_version": config.version,
            "timeline_layout_version": config.layout_version,
            "record_key_fields": list(config.record_key_fields),
            "partition_fields": list(config.partition_fields),
            "ordering_fields": list(config.ordering_fields),
            "merge_mode": merge.mode.value,
            "has_metadata_table": config.has_metadata_table,
            "timezone": config.timezone_name,
        },
        "timeline": {
            "pending": [_instant_json(i) for i in pending],
            "completed": [_instant_json(i) for i in timeline.completed()],
        },
        "partitions": partitions,
        "health": health_summary(table, timeline, view, time.time()),
    }


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _print_text(info: dict[str, Any]) -> None:
    t = info["table"]
    print(f"table {t['name']} ({t['database']}) at {t['base_path']}")
    print(
        f"  type {t['table_type']}, table version {t['table_version']}, timeline layout {t['timeline_layout_version']}"
    )
    print(
        f"  record key {','.join(t['record_key_fields'])}; partitioned by "
        f"{','.join(t['partition_fields']) or '(not partitioned)'}; ordering "
        f"{','.join(t['ordering_fields']) or '-'}; merge mode {t['merge_mode']}"
    )
    if t["has_metadata_table"]:
        print("  has a metadata table (the daemon leaves such tables unchanged)")
    tl = info["timeline"]
    print(f"timeline: {len(tl['pending'])} pending, {len(tl['completed'])} completed")
    for i in tl["pending"]:
        print(f"  PENDING   {i['requested_time']} {i['action']} {i['state']}")
    for i in reversed(tl["completed"]):
        done = f" completed {i['completion_time']}" if i["completion_time"] else ""
        print(f"  COMPLETED {i['requested_time']} {i['action']}{done}")
    print_health(info["health"], _human)
    print(f"partitions: {len(info['partitions'])}")
    for p in info["partitions"]:
        print(f"  {p['partition'] or '(root)'}: {len(p['file_groups'])} file groups")
        for g in p["file_groups"]:
            notes = [
                f"{k.replace('_', ' ')} {g[k]}"
                for k in ("replaced_by", "pending_compaction", "pending_clustering")
                if g[k]
            ]
            print(f"    file group {g['file_id']}" + (f" ({'; '.join(notes)})" if notes else ""))
            for s in g["slices"]:
                base = f"{s['base_file']} ({_human(s['base_file_size'])})" if s["base_file"] else "no base file"
                print(
                    f"      slice {s['base_instant_time']}: {base}, {s['log_file_count']} log files "
                    f"({_human(s['log_files_size'])})"
                )


def cmd_show(args: argparse.Namespace) -> int:
    table = HudiTable.open(Storage(), args.uri)
    info = describe(table)
    if args.json:
        json.dump(info, sys.stdout, indent=2)
        print()
    else:
        _print_text(info)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    table = HudiTable.open(Storage(), args.uri)
    timeline = table.timeline()
    partitions = list(table.config.metadata_partitions)
    differences = verify_metadata_table(table, timeline) if partitions else []
    if args.json:
        rows = [
            {"metadata_partition": d.metadata_partition, "partition": d.partition, "item": d.item, "problem": d.problem}
            for d in differences
        ]
        json.dump({"table": table.label, "metadata_partitions": partitions, "differences": rows}, sys.stdout, indent=2)
        print()
    elif not partitions:
        print(f"{table.name}: no metadata table (hoodie.table.metadata.partitions is empty)")
    else:
        for d in differences:
            print(d)
        verdict = f"{len(differences)} differences" if differences else "in step"
        print(f"{table.name}: metadata table ({', '.join(partitions)}) {verdict}")
    return 1 if differences else 0


def _filters(values: list[str]) -> tuple[tuple[str, str, str], ...]:
    out = []
    for v in values:
        name, sep, value = v.partition("=")
        if not sep or not name:
            raise SystemExit(f"tableservice: --filter expects FIELD=VALUE, got {v!r}")
        out.append((name, "=", value))
    return tuple(out)


def _time_bounds(table: HudiTable, args: argparse.Namespace) -> tuple[str | None, str | None, str | None]:
    """(as of, start, end) as 17-digit instant times, checked; one line on stderr says how they are read."""
    if args.as_of is not None and (args.start is not None or args.end is not None):
        raise InvalidTimeTravelError(
            "--as-of cannot be combined with --start/--end", instant_time=args.as_of, table=table.name
        )
    if args.end is not None and args.start is None:
        raise InvalidTimeTravelError("--end needs --start", instant_time=args.end, table=table.name)
    zone = timeline_zone_label(table)
    if args.as_of is not None:
        as_of = parse_query_time(args.as_of, table=table.name)
        check_as_of(table, table.timeline(), as_of, given=args.as_of)
        print(f"-- as of {as_of} (timeline zone {zone})", file=sys.stderr)
        return as_of, None, None
    if args.start is None:
        return None, None, None
    start = parse_query_time(args.start, option="--start", table=table.name)
    end = parse_query_time(args.end, option="--end", table=table.name) if args.end is not None else None
    check_incremental(table, table.timeline(), start, end)
    kind = (
        "completion times (table version 8+)"
        if compares_completion_times(table.config)
        else "instant (requested) times (table version 6)"
    )
    print(
        f"-- incremental: commits whose {kind} are in ({start}, {end or 'latest'}] (timeline zone {zone})",
        file=sys.stderr,
    )
    return None, start, end


def cmd_read(args: argparse.Namespace) -> int:
    table = HudiTable.open(Storage(), args.uri)
    as_of, start, end = _time_bounds(table, args)
    opts = ReadOptions(
        as_of=as_of,
        columns=tuple(c.strip() for c in args.columns.split(",")) if args.columns else None,
        filters=_filters(args.filter),
        read_optimized=args.read_optimized,
        start=start,
        end=end,
    )
    if args.out:
        writer: pq.ParquetWriter | None = None
        rows = 0
        try:
            for part in iter_read(table, opts):
                if writer is None:
                    writer = pq.ParquetWriter(args.out, part.schema)
                writer.write_table(part)
                rows += part.num_rows
            if writer is None:
                schema = read_schema(table, table.timeline())
                if opts.columns:
                    schema = pa.schema([schema.field(c) for c in opts.columns])
                pq.write_table(schema.empty_table(), args.out)
        finally:
            if writer is not None:
                writer.close()
        print(f"{rows} rows written to {args.out}")
        return 0
    shown = 0
    total = 0
    for part in iter_read(table, opts):
        total += part.num_rows
        if shown < args.limit:
            head = part.slice(0, args.limit - shown)
            for row in head.to_pylist():
                print(json.dumps(row, default=str))
            shown += head.num_rows
    print(f"-- {total} rows", file=sys.stderr)
    return 0
