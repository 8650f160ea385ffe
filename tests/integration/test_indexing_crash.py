"""kill -9 of an indexing action in the middle of its bulk build and in the middle of its catch-up: no reader ever
sees the partition as completed in between, the next attempt completes it, `verify` passes and the record index
holds exactly the table's keys."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tableservice.hudi.action.indexing import execute_indexing, schedule_indexing
from tableservice.hudi.metadata.initialize import initialize_metadata_table
from tableservice.hudi.metadata.verify import verify_metadata_table
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.storage import Storage
from tests.support.metadata_table import partition_records
from tests.support.oracle import hudi_read
from tests.support.trip_tables import create_trip_table

pytestmark = pytest.mark.oracle

# Runs in a child process: executes the pending indexing with a SIGKILL armed at one point.
CHILD = """
import os, signal, sys
import tableservice.hudi.action.indexing as indexing
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.storage import Storage
point, path = sys.argv[1], sys.argv[2]
real_write = Storage.write_bytes

def write_bytes(self, location, data):
    real_write(self, location, data)
    if point == "build" and location.endswith(".hfile") and "/record_index/" in location:
        os.kill(os.getpid(), signal.SIGKILL)  # one base file of the new partition written

def catch_up_write(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)  # the partition is listed inflight, its catch-up not written

Storage.write_bytes = write_bytes
indexing.write_delta_commit = catch_up_write
client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=60))
later = list(Workload(100, 2, 0.3, 0.1, partitions=2, seed=31).steps())

def build(source, partition):
    records = source.records(partition)
    for step in later:  # a writer commits while the index builds: the catch-up has work
        client.apply(step)
    return records

table = HudiTable.open(Storage(), path)
(instant,) = table.timeline().pending_of(Action.INDEXING)
indexing.execute_indexing(table, instant, build=build)
print("not killed")
"""


@pytest.mark.parametrize("point", ["build", "catch-up"])
def test_kill_during_indexing(point: str, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    create_trip_table(path, 9, TableType.MERGE_ON_READ)
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=60))
    for step in Workload(200, 3, 0.3, 0.05, partitions=2, seed=30).steps():
        client.apply(step)
    initialize_metadata_table(HudiTable.open(Storage(), path), ("files",))
    instant = schedule_indexing(HudiTable.open(Storage(), path), ["record_index"])
    assert instant is not None
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), point, path], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    table = HudiTable.open(Storage(), path)
    assert table.config.metadata_partitions == ("files",)  # never listed as completed
    assert table.config.metadata_partitions_inflight == (() if point == "build" else ("record_index",))
    pending = table.timeline().get(instant.requested_time, Action.INDEXING)
    assert pending is not None and pending.is_inflight
    assert [str(d) for d in verify_metadata_table(table)] == []  # readers use the files partition as before

    execute_indexing(HudiTable.open(Storage(), path), instant)
    table = HudiTable.open(Storage(), path)
    assert sorted(table.config.metadata_partitions) == ["files", "record_index"]
    assert table.config.metadata_partitions_inflight == ()
    assert [str(d) for d in verify_metadata_table(table)] == []
    keys = hudi_read(path).column("_hoodie_record_key").to_pylist()
    assert sorted(partition_records(path, "record_index")) == sorted(keys)
