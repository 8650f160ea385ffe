"""kill -9 of a process that keeps a metadata table in step, at the two points where a crash leaves the metadata
table ahead of the data table: between the metadata delta commit and the data commit, and in the middle of the
metadata table's compaction. The next pass recovers, `verify` passes, readers see the same rows."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.metadata.verify import verify_metadata_table
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action, State
from tableservice.planning.metadata.policy import MetadataPolicy
from tableservice.service.metadata import maintain_metadata_table
from tableservice.storage import Storage
from tests.support.fixtures import fixture_table, metadata_fixture_names
from tests.support.oracle import assert_same_rows, hudi_read, listing_view

pytestmark = pytest.mark.oracle
V8 = "quickstart_trips_table/mor/avro/v8_trips_8i3u1d"
V6 = "tests-data/cow/v6_partitioned_metadata"  # Hudi 0.14, one file group in its metadata table

# Runs in a child process: arms a SIGKILL at one point of the metadata path, then does the work.
CHILD = """
import os, signal, sys
from tableservice.hudi.timeline.active import ActiveTimeline
from tableservice.storage import Storage
from tableservice.hudi.table.hudi_table import HudiTable
point, path = sys.argv[1], sys.argv[2]
real_complete = ActiveTimeline.transition_to_completed
real_write = Storage.write_bytes
written = []

def complete(self, instant, content, **kw):
    in_metadata = ".hoodie/metadata" in self.base_path
    if point == "before-data-commit" and not in_metadata and instant.action.value == "clean":
        os.kill(os.getpid(), signal.SIGKILL)
    if point == "mid-metadata-commit" and in_metadata and instant.action.value == "deltacommit":
        os.kill(os.getpid(), signal.SIGKILL)  # its log files are written, its completed file is not
    return real_complete(self, instant, content, **kw)

def write_bytes(self, location, data):
    real_write(self, location, data)
    if point == "mid-metadata-compaction" and location.endswith(".hfile"):
        written.append(location)
        if len(written) == 1:
            os.kill(os.getpid(), signal.SIGKILL)

ActiveTimeline.transition_to_completed = complete
Storage.write_bytes = write_bytes
table = HudiTable.open(Storage(), path)
if point in ("before-data-commit", "mid-metadata-commit"):
    from tableservice.hudi.action.clean import execute_clean, schedule_clean
    from tableservice.planning.clean.plan import CleanPlanner
    from tableservice.planning.clean.policy import CleanPolicy
    policy = CleanPolicy.from_mapping({"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
                                       "hoodie.cleaner.fileversions.retained": "1"})
    execute_clean(table, schedule_clean(table, CleanPlanner(policy), force=True))
else:
    from tableservice.hudi.metadata.compaction import compact_metadata_table
    from tableservice.hudi.metadata.reader import MetadataTable
    compact_metadata_table(MetadataTable.open(table, table.timeline()), 0)
print("not killed")
"""


def _run_killed(point: str, path: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), point, path], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr[-2000:])


def _copy(name: str, tmp_path: Path) -> str:
    if name not in metadata_fixture_names():
        pytest.skip(f"the fixture {name} is absent")
    return str(fixture_table(name, tmp_path))


@pytest.mark.parametrize("name", [V8, V6])
@pytest.mark.parametrize("point", ["before-data-commit", "mid-metadata-commit"])
def test_kill_between_the_metadata_commit_and_the_data_commit(point: str, name: str, tmp_path: Path) -> None:
    path = _copy(name, tmp_path)
    rows = hudi_read(path)
    _run_killed(point, path)
    table = HudiTable.open(Storage(), path)
    pending = list(table.timeline().pending_of(Action.CLEAN))
    assert len(pending) == 1 and pending[0].state is State.INFLIGHT
    mdt = MetadataTable.open(table, table.timeline())
    assert mdt is not None
    orphan = mdt.mdt_timeline.get(pending[0].requested_time)
    assert orphan is not None  # ahead of the data table, invalid to readers
    assert orphan.is_completed == (point == "before-data-commit")
    assert_same_rows(hudi_read(path), rows)
    # the next pass finishes the clean: the metadata delta commit is written again, then the data commit
    from tableservice.hudi.action.clean import execute_clean

    execute_clean(table, pending[0])
    after = HudiTable.open(Storage(), path)
    assert [str(d) for d in verify_metadata_table(after)] == []
    assert_same_rows(hudi_read(path), rows)
    assert_same_rows(hudi_read(str(listing_view(path, tmp_path / "view"))), rows)


@pytest.mark.parametrize("name", [V8, V6])
def test_kill_in_the_middle_of_metadata_compaction(name: str, tmp_path: Path) -> None:
    path = _copy(name, tmp_path)
    rows = hudi_read(path)
    _run_killed("mid-metadata-compaction", path)
    table = HudiTable.open(Storage(), path)
    mdt = MetadataTable.open(table, table.timeline())
    assert mdt is not None
    pending = list(mdt.mdt_timeline.pending_compactions())
    assert len(pending) == 1
    # readers merge the pending slice with the one before it: nothing changes for them
    assert [str(d) for d in verify_metadata_table(table)] == []
    assert_same_rows(hudi_read(path), rows)
    # the metadata service's next run finishes the same plan
    done = maintain_metadata_table(HudiTable.open(Storage(), path), MetadataPolicy())
    assert done.compaction is not None and done.compaction.requested_time == pending[0].requested_time
    after = HudiTable.open(Storage(), path)
    assert [str(d) for d in verify_metadata_table(after)] == []
    assert_same_rows(hudi_read(path), rows)
    assert_same_rows(hudi_read(str(listing_view(path, tmp_path / "view"))), rows)
