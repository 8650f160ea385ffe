"""Metadata tables of table version 6 (Hudi 0.14/0.15 layout), written without Spark on generated tables.

What Hudi 0.14's own metadata writer and readers rely on, checked on the files: `hoodie.properties` of the metadata
table, initialisation instants `<latest data instant>010, 011, ...`, log files named by the slice's base instant
with increasing versions, an inflight file naming each touched group and its base instant, the data rollback's
delta commit at `r` and the metadata rollback at `r006` with command blocks, compaction at `<latest delta
commit>001` completing as a `commit`, clean at `<latest delta commit>002`. `verify` passes at every step."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tableservice.errors import InvalidTableConfigError
from tableservice.hudi.action.rollback import rollback
from tableservice.hudi.file_group.filenames import parse_base_file_name, parse_log_file_name
from tableservice.hudi.file_group.log_format import BlockType, HeaderKey, LogBlock, iter_log_blocks
from tableservice.hudi.metadata.compaction import metadata_compaction_due
from tableservice.hudi.metadata.delta_commit import MetadataRecord, write_delta_commit
from tableservice.hudi.metadata.initialize import initialize_metadata_table
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.metadata.records import files_record
from tableservice.hudi.metadata.verify import verify_metadata_table
from tableservice.hudi.models import HoodieCommitMetadata, encode_commit_metadata
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import ActiveTimeline
from tableservice.hudi.timeline.instant import Action
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.planning.metadata.policy import MetadataPolicy
from tableservice.service.metadata import maintain_metadata_table
from tableservice.storage import Storage
from tests.support.instant_times import shifted
from tests.support.metadata_table import metadata_contents, partition_records
from tests.support.oracle import hudi_read
from tests.support.trip_tables import create_trip_table

pytestmark = pytest.mark.oracle
PARTITIONS = ("files", "column_stats", "bloom_filters", "record_index")


def _diffs(path: str) -> list[str]:
    return [str(d) for d in verify_metadata_table(HudiTable.open(Storage(), path))]


def _mdt(path: str) -> MetadataTable:
    table = HudiTable.open(Storage(), path)
    mdt = MetadataTable.open(table, table.timeline())
    assert mdt is not None
    return mdt


def _logs(path: str, partition: str) -> set[str]:
    return {p.name for p in (Path(path) / ".hoodie" / "metadata" / partition).glob(".*.log.*")}


def _free_time_before(path: str, t: str) -> str:
    """The latest instant time before `t` that no file of the data timeline uses."""
    taken = {name.split(".", 1)[0] for name in os.listdir(Path(path) / ".hoodie")}
    candidate = shifted(t, -1)
    while candidate in taken:
        candidate = shifted(candidate, -1)
    return candidate


def _completed_action(path: str, t: str) -> str:
    return "deltacommit" if (Path(path) / ".hoodie" / f"{t}.deltacommit").exists() else "commit"


def _table_with_metadata(tmp_path: Path, table_type: TableType, steps: list[Any]) -> tuple[str, WriteClient, str]:
    """A version 6 table with one commit, then a metadata table of PARTITIONS; (path, client, that commit)."""
    path = str(tmp_path / "t")
    create_trip_table(path, 6, table_type)
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=60))
    first = client.apply(steps[0]).instant_time
    assert initialize_metadata_table(HudiTable.open(Storage(), path), PARTITIONS) == tuple(sorted(PARTITIONS))
    return path, client, first


@pytest.mark.parametrize("table_type", [TableType.MERGE_ON_READ, TableType.COPY_ON_WRITE])
def test_the_write_client_keeps_a_hudi_0_14_metadata_table_in_step(table_type: TableType, tmp_path: Path) -> None:
    steps = list(Workload(300, 6, 0.3, 0.05, partitions=2, seed=3).steps())
    path, client, first = _table_with_metadata(tmp_path, table_type, steps)
    meta = Path(path) / ".hoodie" / "metadata"
    props = dict(
        line.split("=", 1) for line in (meta / ".hoodie" / "hoodie.properties").read_text().splitlines() if "=" in line
    )
    assert {
        k: props[k] for k in ("hoodie.table.version", "hoodie.timeline.layout.version", "hoodie.archivelog.folder")
    } == {
        "hoodie.table.version": "6",
        "hoodie.timeline.layout.version": "1",
        "hoodie.archivelog.folder": "archived",
    }
    assert props["hoodie.table.keygenerator.class"] == "org.apache.hudi.metadata.HoodieTableMetadataKeyGenerator"
    assert props["hoodie.table.name"] == HudiTable.open(Storage(), path).config.name + "_metadata"
    # one initialisation instant per partition, after the latest data instant, files first
    init = {p: f"{first}{10 + i:03d}" for i, p in enumerate(PARTITIONS)}
    assert sorted(f.name for f in (meta / ".hoodie").glob("*.deltacommit")) == [
        f"{t}.deltacommit" for t in init.values()
    ]
    for partition, t in init.items():
        assert (meta / partition / ".hoodie_partition_metadata").read_text().count(f"commitTime={t}") == 1
        assert all(parse_log_file_name(n).instant_time == t for n in _logs(path, partition))  # type: ignore[union-attr]
    with pytest.raises(InvalidTableConfigError, match="partition_stats"):
        initialize_metadata_table(HudiTable.open(Storage(), path), ("partition_stats",))

    for i, step in enumerate(steps[1:]):
        before = {p: _logs(path, p) for p in PARTITIONS}
        t = client.apply(step).instant_time
        assert _diffs(path) == [], f"after commit {i}"
        assert (meta / ".hoodie" / f"{t}.deltacommit").is_file()
        inflight = json.loads((meta / ".hoodie" / f"{t}.deltacommit.inflight").read_text())
        touched = {
            (p, s["fileId"], s["prevCommit"]) for p, stats in inflight["partitionToWriteStats"].items() for s in stats
        }
        data = json.loads((Path(path) / ".hoodie" / f"{t}.{_completed_action(path, t)}").read_text())
        wrote_base = any(
            s["path"].endswith(".parquet") for stats in data["partitionToWriteStats"].values() for s in stats
        )
        for partition in PARTITIONS:
            new = _logs(path, partition) - before[partition]
            # bloom filters come with new base files only (a merge-on-read update may write log files alone)
            assert bool(new) == (partition != "bloom_filters" or wrote_base), f"{partition} at {t}"
            for name in new:  # the next version of the slice's log files, named by its base instant
                parsed = parse_log_file_name(name)
                assert parsed is not None and parsed.instant_time == init[partition]
                same_slice = [parse_log_file_name(n) for n in before[partition]]
                highest = max(v.version for v in same_slice if v is not None and v.file_id == parsed.file_id)
                assert parsed.version == highest + 1
                assert (partition, parsed.file_id, init[partition]) in touched
    rows = hudi_read(path)
    index = partition_records(path, "record_index")
    assert sorted(index) == sorted(rows.column("_hoodie_record_key").to_pylist())


def test_a_failed_write_is_rolled_back_with_command_blocks_and_a_later_attempt_counts(
    tmp_path: Path, monkeypatch: Any
) -> None:
    steps = list(Workload(300, 5, 0.3, 0.05, partitions=2, seed=4).steps())
    path, client, _ = _table_with_metadata(tmp_path, TableType.MERGE_ON_READ, steps)
    client.apply(steps[1])
    real = ActiveTimeline.transition_to_completed

    def crash(self: ActiveTimeline, instant: Any, content: bytes, **kw: Any) -> Any:
        if ".hoodie/metadata" not in self.base_path and instant.action is Action.DELTA_COMMIT:
            raise KeyboardInterrupt("killed between the metadata commit and the data commit")
        return real(self, instant, content, **kw)

    monkeypatch.setattr(ActiveTimeline, "transition_to_completed", crash)
    with pytest.raises(KeyboardInterrupt):
        client.apply(steps[2])
    monkeypatch.undo()
    table = HudiTable.open(Storage(), path)
    (failed,) = table.timeline().pending()
    x = failed.requested_time
    assert _mdt(path).mdt_timeline.get(x, Action.DELTA_COMMIT) is not None
    contents = metadata_contents(path)
    assert _diffs(path) == []  # the failed write's log files hold only blocks of a pending instant
    workload = Path(path) / ".hoodie" / "metadata" / ".hoodie" / f"{x}.deltacommit.inflight"
    touched_by_x = set(json.loads(workload.read_text())["partitionToWriteStats"])
    assert {"files", "column_stats", "record_index"} <= touched_by_x

    done = rollback(table, failed)
    r = done.requested_time
    mdt = _mdt(path)
    assert mdt.mdt_timeline.get(x) is None
    assert mdt.mdt_timeline.get(r, Action.DELTA_COMMIT) is not None  # the log files the rollback leaves
    assert mdt.mdt_timeline.get(r + "006", Action.ROLLBACK) is not None
    for partition in touched_by_x:  # each one x wrote to: a command block for x in a new `_1-0-1` file
        folder = Path(path) / ".hoodie" / "metadata" / partition
        targets = {
            b.header.get(HeaderKey.TARGET_INSTANT_TIME)
            for f in folder.glob(".*.log.*_1-0-1")
            for b in iter_log_blocks(Storage(), str(f))
            if isinstance(b, LogBlock) and b.block_type is BlockType.COMMAND
        }
        assert targets == {x}, partition
    assert _diffs(path) == []
    after = metadata_contents(path)
    assert after["record_index"] == contents["record_index"] and after["column_stats"] == contents["column_stats"]

    # An attempt of the same instant after the command block counts (Hudi's scanner drops only earlier blocks).
    table = HudiTable.open(Storage(), path)
    table.active.transition_to_inflight(table.active.create_requested(x, Action.DELTA_COMMIT))
    again = MetadataTable.open(table, table.reload())
    assert again is not None
    partition = sorted(again.file_listing())[0]
    write_delta_commit(again, x, [MetadataRecord("files", partition, files_record({"again.parquet": (7, False)}))])
    inflight = table.reload().get(x)
    assert inflight is not None
    empty = HoodieCommitMetadata(
        partition_to_write_stats={}, compacted=False, extra_metadata={}, operation_type="UPSERT"
    )
    table.active.transition_to_completed(inflight, encode_commit_metadata(empty, table_version=6))
    assert _mdt(path).file_listing()[partition]["again.parquet"] == 7


def test_metadata_compaction_and_clean_take_hudi_0_14_instants(tmp_path: Path) -> None:
    steps = list(Workload(300, 9, 0.3, 0.05, partitions=2, seed=6).steps())
    path, client, first = _table_with_metadata(tmp_path, TableType.MERGE_ON_READ, steps)
    for step in steps[1:4]:
        client.apply(step)
    # a data instant pending at or before the latest metadata delta commit holds the compaction
    table = HudiTable.open(Storage(), path)
    latest = max(i.requested_time for i in _mdt(path).mdt_timeline.completed() if i.action is Action.DELTA_COMMIT)
    held = table.active.create_requested(_free_time_before(path, latest), Action.DELTA_COMMIT)
    decision = metadata_compaction_due(_mdt(path), 2)
    assert not decision.due and "pending data instant" in decision.reason
    table.active.delete_pending(held)

    before = metadata_contents(path)
    policy = MetadataPolicy(
        compact_max_delta_commits=3, cleaner_commits_retained=2, keep_min_commits=20, keep_max_commits=30
    )
    done = maintain_metadata_table(HudiTable.open(Storage(), path), policy)
    assert done.compaction is not None and done.compaction.requested_time == latest + "001"
    meta = Path(path) / ".hoodie" / "metadata"
    assert (meta / ".hoodie" / f"{latest}001.commit").is_file()
    assert (meta / ".hoodie" / f"{latest}001.compaction.requested").is_file()
    assert metadata_contents(path) == before
    assert _diffs(path) == []
    mdt = _mdt(path)
    for partition in PARTITIONS:
        for file_slice in mdt.file_slices(partition):
            if list(mdt.slice_records(file_slice)):  # a group with records: a base file at the compaction
                assert file_slice.base_instant_time == latest + "001" and not file_slice.log_files
                assert file_slice.base_file is not None
                parsed = parse_base_file_name(file_slice.base_file.file_name)
                assert parsed is not None and parsed.instant_time == latest + "001"
            else:  # none: no file written, the group keeps its initialisation slice (as Hudi 0.14 does)
                assert file_slice.base_file is None and file_slice.base_instant_time.endswith(
                    ("010", "011", "012", "013")
                )
    for step in steps[4:]:
        t = client.apply(step).instant_time
        assert _diffs(path) == []
        assert any(n.startswith(f".files-0000-0_{latest}001.log.") for n in _logs(path, "files")), t
    newest = max(i.requested_time for i in _mdt(path).mdt_timeline.completed() if i.action is Action.DELTA_COMMIT)
    done = maintain_metadata_table(HudiTable.open(Storage(), path), policy)
    assert done.compaction is not None and done.compaction.requested_time == newest + "001"
    assert done.clean is not None and done.clean.requested_time == newest + "002"
    assert (meta / ".hoodie" / f"{newest}002.clean").is_file()
    # the initialisation's slice, superseded by the first compaction before the retained delta commits, is gone
    names = [p.name for p in (meta / "files").iterdir() if p.name != ".hoodie_partition_metadata"]
    slices = {(parse_log_file_name(n) or parse_base_file_name(n)).instant_time for n in names}  # type: ignore[union-attr]
    assert slices == {latest + "001", newest + "001"}
    assert not [p.name for p in (meta / "files").glob(f"*{first}010*")]
    assert _diffs(path) == []


def test_a_partition_built_after_the_last_data_commit_holds_compaction_and_clean_takes_a_fresh_time(
    tmp_path: Path,
) -> None:
    """Hudi 0.14 suffixes its metadata compaction and clean to the data commit whose delta commit it just made; when
    the latest metadata delta commit is the metadata table's own (a partition built at `<t>010`), the compaction
    waits for the next data commit and a clean takes a fresh time, never `<t>010001` (no instant time)."""
    steps = list(Workload(300, 8, 0.3, 0.05, partitions=2, seed=8).steps())
    path = str(tmp_path / "t")
    create_trip_table(path, 6, TableType.MERGE_ON_READ)
    client = WriteClient(Storage(), path, options=WriteOptions(max_file_records=60))
    client.apply(steps[0])
    initialize_metadata_table(HudiTable.open(Storage(), path), ("files",))
    policy = MetadataPolicy(
        compact_max_delta_commits=2, cleaner_commits_retained=1, keep_min_commits=20, keep_max_commits=30
    )
    for step in steps[1:3]:
        client.apply(step)
    first = maintain_metadata_table(HudiTable.open(Storage(), path), policy)
    assert first.compaction is not None and first.clean is None
    for step in steps[3:5]:
        client.apply(step)
    data_latest = max(i.requested_time for i in HudiTable.open(Storage(), path).timeline().completed())
    assert initialize_metadata_table(HudiTable.open(Storage(), path), ("files", "column_stats")) == (
        "column_stats",
        "files",
    )
    own = max(i.requested_time for i in _mdt(path).mdt_timeline.completed() if i.action is Action.DELTA_COMMIT)
    assert own == data_latest + "010"  # the metadata table's own delta commit is the latest
    decision = metadata_compaction_due(_mdt(path), 2)
    assert not decision.due and decision.instant_time is None
    assert decision.reason == f"the latest delta commit {own} is the metadata table's own: waits for a data commit"

    before = metadata_contents(path)
    done = maintain_metadata_table(HudiTable.open(Storage(), path), policy)
    assert done.compaction is None
    assert done.clean is not None and len(done.clean.requested_time) == 17 and done.clean.requested_time > own
    assert metadata_contents(path) == before and _diffs(path) == []

    t = client.apply(steps[5]).instant_time
    done = maintain_metadata_table(HudiTable.open(Storage(), path), policy)
    assert done.compaction is not None and done.compaction.requested_time == t + "001"
    assert _diffs(path) == []
