"""The metadata service on copies of the real tables: compaction, clean and archival of the metadata table keep
every record and leave readers' results unchanged; the daemon's pass runs it when due; `table verify` reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from tableservice.cli import main
from tableservice.hudi.metadata.delta_commit import MetadataRecord, write_delta_commit
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.metadata.records import files_record
from tableservice.hudi.metadata.verify import verify_metadata_table
from tableservice.hudi.models import HoodieCommitMetadata, encode_commit_metadata
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.planning.metadata.policy import MetadataPolicy
from tableservice.service.metadata import MetadataService, maintain_metadata_table
from tableservice.service.protocol import ServiceSettings
from tableservice.storage import Storage
from tests.support.fixtures import fixture_table, metadata_fixture_names
from tests.support.metadata_table import metadata_contents
from tests.support.oracle import assert_same_rows, hudi_read, listing_view

pytestmark = pytest.mark.oracle
NAMES = metadata_fixture_names() or ["none"]
V8 = "quickstart_trips_table/mor/avro/v8_trips_8i3u1d"


def _files_on_disk(path: str) -> set[str]:
    """The metadata table's data files (its partitions, not its timeline)."""
    root = Path(path) / ".hoodie" / "metadata"
    return {str(p.relative_to(root)) for p in root.glob("*/*") if p.is_file() and p.parent.name != ".hoodie"}


@pytest.mark.parametrize("name", NAMES)
def test_maintenance_compacts_cleans_and_archives_without_changing_what_readers_see(name: str, tmp_path: Path) -> None:
    if name == "none":
        pytest.skip("no fixtures with a metadata table")
    path = str(fixture_table(name, tmp_path))
    rows = hudi_read(path)
    before = metadata_contents(path)
    files_before = _files_on_disk(path)
    policy = MetadataPolicy(
        compact_max_delta_commits=1, cleaner_commits_retained=1, keep_min_commits=2, keep_max_commits=3
    )
    table = HudiTable.open(Storage(), path)
    # one more delta commit, so that a compaction is due on every fixture
    mdt = MetadataTable.open(table, table.timeline())
    assert mdt is not None
    key = sorted(mdt.file_listing())[0] or "."
    write_delta_commit(mdt, "20991231000000000", [MetadataRecord("files", key, files_record({}))])
    first = maintain_metadata_table(table, policy)
    assert first.compaction is not None and first.compaction.is_completed
    # one more delta commit: the slices the first compaction superseded are no longer needed by the retained one
    write_delta_commit(
        MetadataTable.open(table, table.reload()),  # type: ignore[arg-type]
        "20991231000000010",
        [MetadataRecord("files", key, files_record({}))],
    )
    done = maintain_metadata_table(table, policy)
    assert done.compaction is not None and done.compaction.is_completed
    assert first.clean is not None or done.clean is not None
    assert first.archived or done.archived, "the initialisation instants precede every data write"
    assert metadata_contents(path) == before
    assert [str(d) for d in verify_metadata_table(HudiTable.open(Storage(), path))] == []
    assert_same_rows(hudi_read(path), rows)
    assert_same_rows(hudi_read(str(listing_view(path, tmp_path / "view"))), rows)
    files_after = _files_on_disk(path)
    assert files_after - files_before, "compaction wrote base files"
    assert files_before - files_after, "the clean deleted superseded files"
    after = HudiTable.open(Storage(), path)
    mdt_after = MetadataTable.open(after, after.timeline())
    assert mdt_after is not None
    for partition in mdt_after.partitions:
        for file_slice in mdt_after.file_slices(partition):
            assert file_slice.base_instant_time == done.compaction.requested_time
    timeline = mdt_after.mdt_timeline
    first_data_write = min(i.requested_time for i in after.timeline().write_instants())
    for instant in (*first.archived, *done.archived):
        assert instant.requested_time < first_data_write
        assert timeline.get(instant.requested_time, instant.action) is None


def test_the_service_is_due_after_enough_delta_commits(tmp_path: Path) -> None:
    if V8 not in NAMES:
        pytest.skip("v8 fixture absent")
    path = str(fixture_table(V8, tmp_path))
    table = HudiTable.open(Storage(), path)
    service = MetadataService(ServiceSettings(MetadataPolicy(compact_max_delta_commits=2)))
    assert service.applies(table.refresh())
    assert not service.due(table.refresh())  # the fixture's last action was a metadata compaction
    mdt = MetadataTable.open(table, table.timeline())
    assert mdt is not None
    for _ in range(2):  # two writer commits, each with its metadata delta commit first
        t = table.active.new_instant_time(table.reload())
        inflight = table.active.transition_to_inflight(table.active.create_requested(t, Action.DELTA_COMMIT))
        write_delta_commit(mdt, t, [MetadataRecord("files", "city=chennai", files_record({}))])
        empty = HoodieCommitMetadata(partition_to_write_stats={}, compacted=False, extra_metadata={})
        table.active.transition_to_completed(inflight, encode_commit_metadata(empty, table_version=8))
        mdt = MetadataTable.open(table, table.reload())
        assert mdt is not None
    assert service.due(table.refresh())
    done = maintain_metadata_table(table, service.settings.policy)
    assert done.compaction is not None
    assert not service.due(table.refresh())


def test_table_verify_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if V8 not in NAMES:
        pytest.skip("v8 fixture absent")
    path = str(fixture_table(V8, tmp_path))
    assert main(["table", "verify", path]) == 0
    assert "in step" in capsys.readouterr().out
    table = HudiTable.open(Storage(), path)
    mdt = MetadataTable.open(table, table.timeline())
    assert mdt is not None
    live = mdt.file_listing()["city=chennai"]
    name = sorted(live)[0]
    write_delta_commit(
        mdt, "20991231000000000", [MetadataRecord("files", "city=chennai", files_record({name: (0, True)}))]
    )
    assert main(["table", "verify", path]) == 1
    out = capsys.readouterr().out
    assert f"[files] city=chennai: {name}: committed file ({live[name]} bytes) is not listed" in out
    assert "1 differences" in out
