"""`tableservice demo`: the whole product in one command, on embedded defaults.

Makes a merge-on-read table with the write client in a temporary folder, runs the daemon (local Spark,
in-process lock) until it has compacted the table, prints the file slices before and after, checks with hudi-rs
that the snapshot is unchanged, and shows where the metrics were served.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import anyio

from tableservice.cli.logsetup import configure_logging
from tableservice.config import load_config
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.schema import avro_schema_from_arrow
from tableservice.hudi.timeline.instant import Action
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.create import TableSpec, create_table
from tableservice.hudi.write.workload import ORDERING_FIELD, PARTITION_FIELD, RECORD_KEY, TRIP_SCHEMA, Workload
from tableservice.service.daemon import Daemon
from tableservice.storage import Storage

CONFIG = """\
# Written by `tableservice demo`.
service:
  poll_interval_seconds: 2
  shutdown_grace_seconds: 30
  http: {{host: 127.0.0.1, port: 0}}
  log: {{level: WARNING}}
spark:
  master: "local[2]"
  conf: {{spark.ui.enabled: "false", spark.sql.shuffle.partitions: "4"}}
defaults:
  compaction:
    hoodie.compact.inline.max.delta.commits: 3
tables:
  - uri: {uri}
    name: demo_trips
"""


def register(sub: Any) -> None:
    demo = sub.add_parser("demo", help="make a table, let the daemon compact it, check the result")
    demo.add_argument("--dir", help="folder to work in (default: a new temporary folder)")
    demo.add_argument("--records", type=int, default=20_000)
    demo.set_defaults(handler=cmd_demo)


def _print_slices(table: HudiTable, title: str) -> None:
    print(title)
    for s in table.file_system_view().latest_slices():
        base = s.base_file.file_name if s.base_file else "(no base file)"
        print(f"  {s.partition_path or '(root)'}/{s.file_id}: base {base}, {len(s.log_files)} log files")


def cmd_demo(args: argparse.Namespace) -> int:
    configure_logging("WARNING")
    work = Path(args.dir or tempfile.mkdtemp(prefix="tableservice-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    uri = str(work / "trips")
    storage = Storage()
    print(f"1. writing a merge-on-read table (version 9) at {uri}")
    create_table(
        storage,
        uri,
        TableSpec(
            name="demo_trips",
            table_type=TableType.MERGE_ON_READ,
            version=9,
            schema=avro_schema_from_arrow(TRIP_SCHEMA, "demo_trips_record", "hoodie.demo_trips"),
            record_key_fields=(RECORD_KEY,),
            partition_fields=(PARTITION_FIELD,),
            ordering_fields=(ORDERING_FIELD,),
        ),
    )
    client = WriteClient(storage, uri, options=WriteOptions(max_file_records=max(1000, args.records // 6)))
    for step in Workload(args.records, 4, 0.2, 0.01, partitions=3).steps():
        result = client.apply(step)
        print(f"   {result.action.value} {result.instant_time}: {step.records.num_rows} records")
    table = HudiTable.open(storage, uri)
    _print_slices(table, "2. file slices before the daemon runs:")
    before = _hudi_rs_snapshot(uri)

    config_path = work / "tableservice.yaml"
    config_path.write_text(CONFIG.format(uri=uri))
    config = load_config(str(config_path))
    daemon = Daemon(str(config_path), config)
    print(f"3. running the daemon (config {config_path}) until the table is compacted")
    metrics_text = ""

    def watch() -> None:
        nonlocal metrics_text
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            time.sleep(1)
            t = HudiTable.open(storage, uri).timeline()
            if any(i.action is Action.COMPACTION and i.is_completed for i in t):
                break
        if daemon.http_port:
            url = f"http://127.0.0.1:{daemon.http_port}/metrics"
            # The timeline shows the compaction once it commits; the daemon counts it when the action returns, a
            # moment later: scraped until it is counted (or 30 s).
            counted_by = time.monotonic() + 30
            while True:
                with urllib.request.urlopen(url, timeout=10) as resp:
                    metrics_text = resp.read().decode()
                if compactions_counted(metrics_text) or time.monotonic() > counted_by:
                    break
                time.sleep(0.2)
            print(f"   metrics were served at {url}")
        daemon.request_stop()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    anyio.run(daemon.run)
    watcher.join()
    table = HudiTable.open(storage, uri)
    _print_slices(table, "4. file slices after:")
    done = [i for i in table.timeline().completed() if i.action is Action.COMPACTION]
    print(f"   completed compactions: {[i.requested_time for i in done]}")
    for line in metrics_text.splitlines():
        if line.startswith(
            ("tableservice_actions_completed_total", "tableservice_written_bytes_total", "tableservice_pending_actions")
        ):
            print(f"   {line}")
    after = _hudi_rs_snapshot(uri)
    if before is None or after is None:
        print("5. hudi-rs (the `hudi` package) is not installed: snapshot check skipped")
        return 0 if done else 1
    same = before == after
    print(f"5. hudi-rs reads the same {len(after)} rows before and after compaction: {same}")
    return 0 if same and done else 1


def compactions_counted(metrics_text: str) -> float:
    """The completed compactions `tableservice_actions_completed_total` counts in a /metrics text (0 if none)."""
    prefix = 'tableservice_actions_completed_total{action="compaction",'
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines() if line.startswith(prefix))


def _hudi_rs_snapshot(uri: str) -> list[tuple[Any, ...]] | None:
    try:
        from hudi import HudiTableBuilder
    except ImportError:
        return None
    import pyarrow as pa

    batches = HudiTableBuilder.from_base_uri(uri).build().read()
    table = pa.Table.from_batches(batches)
    table = table.drop_columns(["_hoodie_file_name"])
    return sorted(tuple(r.values()) for r in table.to_pylist())
