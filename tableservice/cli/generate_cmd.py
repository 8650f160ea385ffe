"""`tableservice generate`: create a table and ingest a realistic workload with the write client."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable
from typing import Any

from tableservice.errors import TableServiceError, UnsupportedTableError
from tableservice.hudi.metadata.initialize import initialize_metadata_table
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import ReadOptions, read
from tableservice.hudi.table.schema import avro_schema_from_arrow
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.create import MergeModeName, TableSpec, create_table
from tableservice.hudi.write.workload import (
    ORDERING_FIELD,
    PARTITION_FIELD,
    RECORD_KEY,
    TRIP_SCHEMA,
    FollowUp,
    Workload,
    WorkloadStep,
)
from tableservice.storage import Storage


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def register(sub: Any) -> None:
    gen = sub.add_parser("generate", help="create a Hudi table and write a generated workload into it")
    gen.add_argument("uri", help="where to create the table (must not hold a table yet)")
    gen.add_argument("--table-type", choices=[t.value for t in TableType], default="MERGE_ON_READ")
    gen.add_argument("--table-version", type=int, choices=[6, 8, 9], default=9)
    gen.add_argument("--records", type=int, default=10_000, help="records inserted by the first commit")
    gen.add_argument("--commits", type=int, default=5, help="commits in all (the first inserts)")
    gen.add_argument("--update-fraction", type=_fraction, default=0.2)
    gen.add_argument("--delete-fraction", type=_fraction, default=0.01)
    gen.add_argument("--late-fraction", type=_fraction, default=0.1, help="updates arriving with older event times")
    gen.add_argument("--log-block", choices=["avro", "parquet"], default="avro")
    gen.add_argument("--partitions", type=int, default=3, help="cities to partition by (0: not partitioned)")
    gen.add_argument(
        "--merge-mode", choices=[m.value for m in MergeModeName], default=MergeModeName.EVENT_TIME_ORDERING.value
    )
    gen.add_argument("--max-file-records", type=int, default=500_000, help="records per new base file")
    gen.add_argument("--seed", type=int, default=7)
    gen.add_argument("--name", default="trips")
    gen.add_argument(
        "--metadata",
        default="",
        metavar="PARTITIONS",
        help="create a metadata table with these partitions (comma-separated: files, column_stats, partition_stats, "
        "record_index; table versions 8 and 9) and keep it in step with every commit",
    )
    gen.set_defaults(handler=cmd_generate)

    more = sub.add_parser(
        "write",
        help="add commits to a table `generate` made: updates and deletes of its live records, new inserts "
        "(drills and demos beside a running daemon)",
    )
    more.add_argument("uri", help="a table made by `tableservice generate`")
    more.add_argument("--commits", type=int, default=1, help="commits to add")
    more.add_argument("--update-fraction", type=_fraction, default=0.2, help="of the live records, per commit")
    more.add_argument("--delete-fraction", type=_fraction, default=0.0, help="of the live records, per commit")
    more.add_argument("--records", type=int, default=0, help="new records inserted per commit")
    more.add_argument("--late-fraction", type=_fraction, default=0.1, help="updates arriving with older event times")
    more.add_argument("--log-block", choices=["avro", "parquet"], default="avro")
    more.add_argument("--max-file-records", type=int, default=500_000, help="records per new base file")
    more.add_argument("--seed", type=int, default=11, help="a new seed gives new keys for the inserts")
    more.set_defaults(handler=cmd_write)


def cmd_generate(args: argparse.Namespace) -> int:
    storage = Storage()
    spec = TableSpec(
        name=args.name,
        table_type=TableType(args.table_type),
        version=args.table_version,
        schema=avro_schema_from_arrow(TRIP_SCHEMA, f"{args.name}_record", f"hoodie.{args.name}"),
        record_key_fields=(RECORD_KEY,),
        partition_fields=(PARTITION_FIELD,) if args.partitions > 0 else (),
        ordering_fields=(ORDERING_FIELD,),
        merge_mode=MergeModeName(args.merge_mode),
    )
    create_table(storage, args.uri, spec)
    partitions = [p.strip() for p in args.metadata.split(",") if p.strip()]
    if partitions:
        built = initialize_metadata_table(HudiTable.open(storage, args.uri), partitions)
        print(f"metadata table with {', '.join(built)}")
    client = WriteClient(
        storage, args.uri, options=WriteOptions(log_block_format=args.log_block, max_file_records=args.max_file_records)
    )
    workload = Workload(
        args.records,
        args.commits,
        args.update_fraction,
        args.delete_fraction,
        partitions=args.partitions,
        late_fraction=args.late_fraction,
        seed=args.seed,
    )
    _apply(client, workload.steps())
    print(f"created {spec.table_type.value} table version {spec.version} at {args.uri}")
    return 0


def cmd_write(args: argparse.Namespace) -> int:
    storage = Storage()
    table = HudiTable.open(storage, args.uri)
    needed = (RECORD_KEY, ORDERING_FIELD, PARTITION_FIELD)
    try:
        live = read(table, ReadOptions(columns=needed))
    except TableServiceError as e:
        raise e.with_context(table=table.label) from e
    missing = [c for c in needed if c not in live.column_names]
    if missing:
        raise UnsupportedTableError(
            f"`write` adds generated trip records: the table has no {', '.join(missing)} column (make one with "
            "`tableservice generate`)",
            table=table.label,
        )
    follow = FollowUp(
        args.commits, args.update_fraction, args.delete_fraction, args.records, args.late_fraction, args.seed
    )
    client = WriteClient(
        storage, args.uri, options=WriteOptions(log_block_format=args.log_block, max_file_records=args.max_file_records)
    )
    try:
        steps = list(follow.steps(live.select(list(needed))))
    except ValueError as e:
        raise UnsupportedTableError(f"`write` adds generated trip records: {e}", table=table.label) from e
    _apply(client, steps)
    return 0


def _apply(client: WriteClient, steps: Iterable[WorkloadStep]) -> None:
    """Write each step as one commit; a line per commit."""
    for step in steps:
        started = time.monotonic()
        result = client.apply(step)
        deletes = step.deletes.num_rows if step.deletes is not None else 0
        print(
            f"{result.action.value} {result.instant_time}: {step.operation.value} {step.records.num_rows} records"
            f"{f', {deletes} deletes' if deletes else ''} in {time.monotonic() - started:.1f}s"
        )
