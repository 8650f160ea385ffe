"""Object-store requests per action on S3: a compaction, a clustering and a clean (python -m bench.requests).

One merge-on-read table (`--records` records in `--partitions` partitions, `--commits` delta commits of 30%
updates, files of `--file-records` records) is written through a counting proxy in front of a moto server. Each
action is scheduled, then executed as the daemon's worker executes it (its executor lease, Spark `local[2]` for the
compaction and clustering tasks); the clean comes last, after one more write, when the compaction and clustering
left older slices.

Every request is counted twice, independently: by the proxy (what the server received) and in process (the
daemon's own requests counted at the storage boundary, plus those the Spark tasks counted in their processes and
reported: the action's history record, which is the cost ledger's source). Printed by kind for each step: the
proxy's counts, then the in-process ones where they differ.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter
from typing import Any

import boto3

from tableservice.config.cost import REQUEST_KINDS
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.schema import avro_schema_from_arrow
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.create import TableSpec, create_table
from tableservice.hudi.write.workload import ORDERING_FIELD, RECORD_KEY, TRIP_SCHEMA, Workload
from tableservice.locks import InProcessLockProvider
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.clustering.policy import ClusteringPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.service.history import ActionHistory
from tableservice.service.protocol import ServiceSettings
from tableservice.service.table_state import TableSettings
from tableservice.service.table_worker import TableWorker
from tableservice.storage import Storage, StorageOptions
from tableservice.storage.requests import counting

CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
BUCKET = "requests"
KINDS = tuple(k.upper() for k in REQUEST_KINDS)


def make_table(storage: Storage, uri: str, args: argparse.Namespace) -> None:
    create_table(
        storage,
        uri,
        TableSpec(
            name="requests_bench",
            table_type=TableType.MERGE_ON_READ,
            version=args.version,
            schema=avro_schema_from_arrow(TRIP_SCHEMA, "requests_record", "hoodie.requests"),
            record_key_fields=(RECORD_KEY,),
            partition_fields=("city",) if args.partitions else (),
            ordering_fields=(ORDERING_FIELD,),
        ),
    )
    write(storage, uri, args, args.commits, seed=7)


def write(storage: Storage, uri: str, args: argparse.Namespace, commits: int, seed: int) -> None:
    client = WriteClient(storage, uri, options=WriteOptions(max_file_records=args.file_records))
    for step in Workload(args.records, commits, 0.3, 0.0, partitions=args.partitions, seed=seed).steps():
        client.apply(step)


def _kinds(counts: dict[str, int]) -> dict[str, int]:
    return {k: int(counts.get(k, 0)) for k in KINDS}


def _row(label: str, server: dict[str, int], here: dict[str, int], seconds: float) -> dict[str, Any]:
    return {"step": label, "server": _kinds(server), "in_process": _kinds(here), "seconds": seconds}


def measure(
    proxy: Any, worker: TableWorker, history: ActionHistory, service: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Schedule one action of `service` (counted around the call) and execute it (counted over the window of its
    history record)."""
    svc = worker.service(service)
    ctx = worker.context()
    proxy.reset_seen()
    started = time.monotonic()
    with counting() as tally:
        instant = svc.schedule(ctx)
    scheduled = _row(f"{service}: schedule", Counter(r.kind for r in proxy.seen()), tally.counts(), 0.0)
    scheduled["seconds"] = time.monotonic() - started
    if instant is None:
        raise RuntimeError(f"no {service} was scheduled: nothing to do on the table")
    proxy.reset_seen()
    result = worker.run_one(service, instant.requested_time)
    if result.failed:
        raise RuntimeError(f"{service} failed: {result.failed[0].error}")
    record = next(r for r in history.query() if r.action == service and r.instant == instant.requested_time)
    window = [r for r in proxy.seen() if record.started <= r.at <= record.ended]
    recorded = {k.upper(): int(getattr(record, f"requests_{k}")) for k in REQUEST_KINDS}
    executed = _row(f"{service}: execute", Counter(r.kind for r in window), recorded, record.ended - record.started)
    executed["files_written"] = sum(1 for r in window if r.kind == "PUT" and r.key.endswith(".parquet"))
    executed["inputs_headed"] = sum(1 for r in window if r.kind == "HEAD" and "/.hoodie/" not in r.key)
    return scheduled, executed


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from tableservice.executors.spark import SparkExecutor, SparkSettings
    from tests.support.faults.s3_proxy import FaultProxy
    from tests.support.servers import moto_server

    os.environ.update(CREDS)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    rows: list[dict[str, Any]] = []
    with moto_server() as moto, FaultProxy(moto.endpoint_url) as proxy, tempfile.TemporaryDirectory() as tmp:
        boto3.client("s3", endpoint_url=moto.endpoint_url, region_name="us-east-1").create_bucket(Bucket=BUCKET)
        options = StorageOptions(endpoint_url=proxy.endpoint_url, region="us-east-1")
        storage = Storage(options)
        uri = f"s3://{BUCKET}/table"
        started = time.monotonic()
        make_table(storage, uri, args)
        print(f"  table written in {time.monotonic() - started:.1f}s", flush=True)
        executor = SparkExecutor(SparkSettings(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}))
        executor.start()
        try:
            history = ActionHistory(os.path.join(tmp, "history.sqlite"))
            settings = TableSettings(
                uri=uri,
                name="requests_bench",
                compaction=ServiceSettings(CompactionPolicy()),
                clustering=ServiceSettings(ClusteringPolicy()),
                clean=ServiceSettings(CleanPolicy.model_validate({"commits_retained": 1})),
            )
            worker = TableWorker(settings, storage, InProcessLockProvider(), executor, None, options, history=history)
            rows.extend(measure(proxy, worker, history, "compaction"))
            rows.extend(measure(proxy, worker, history, "clustering"))
            # one more write: the slices compaction and clustering replaced fall out of the retained commits
            write(storage, uri, args, 1, seed=8)
            rows.extend(measure(proxy, worker, history, "clean"))
        finally:
            executor.stop()
    return rows


def show(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'':22}" + "".join(f"{k:>8}" for k in KINDS) + "   (S3 server's counts; in-process where different)")
    for row in rows:
        server, here = row["server"], row["in_process"]
        print(f"{row['step']:22}" + "".join(f"{server[k]:>8}" for k in KINDS) + f"   {row['seconds']:.1f}s")
        if here != server:
            print(f"{'  in process':22}" + "".join(f"{here[k]:>8}" for k in KINDS))
        if "files_written" in row:
            print(f"{'':22}files written: {row['files_written']}, input files HEADed: {row['inputs_headed']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--commits", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--file-records", type=int, default=2_000)
    parser.add_argument("--version", type=int, default=9, choices=(6, 8, 9))
    args = parser.parse_args()
    show(run(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
