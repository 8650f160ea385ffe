"""Listing a data table's files through the metadata table's `files` partition: one read of one file group
instead of a listing per partition (what makes large tables on S3 cheap)."""

from __future__ import annotations

from collections import defaultdict

from tableservice.hudi.file_group.log_format import BlockType, LogBlock, iter_log_blocks
from tableservice.hudi.metadata.keys import MetadataPartition
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.storage import FileInfo, join


def lists_through_metadata(table: HudiTable) -> bool:
    """Whether the table's `files` partition is built and readable (Hudi's writers list through it then)."""
    return MetadataPartition.FILES.value in table.config.metadata_partitions


def metadata_listing(table: HudiTable, timeline: Timeline) -> dict[str, list[FileInfo]]:
    """The data files by partition as the `files` partition lists them, in the shape of a storage listing
    (data files only; modification times unknown, 0)."""
    mdt = MetadataTable.open(table, timeline)
    if mdt is None:
        return {}
    out: dict[str, list[FileInfo]] = {}
    for partition, files in sorted(mdt.file_listing().items()):
        folder = join(table.base_path, partition) if partition else table.base_path
        out[partition] = [FileInfo(join(folder, name), size, 0, False) for name, size in sorted(files.items())]
    return out


def committed_files(table: HudiTable, timeline: Timeline) -> dict[str, dict[str, int]]:
    """What the `files` partition must list, from a storage listing: partition -> file name -> size of every file
    of a completed instant (every slice of every file group, replaced groups included until a clean). In table
    version 6 a log file is named by its slice, not by the instant that wrote it: one whose blocks all belong to
    pending instants is left out (a rollback's command-block files and a rolled-back attempt's files count:
    the rollback lists them)."""
    view = table.file_system_view(timeline=timeline, listing=table.list_storage_files())
    pending = {i.requested_time for i in timeline.pending()} if table.config.version < 8 else set()
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for group in view.all_file_groups():
        for file_slice in group.slices:
            if file_slice.base_file is not None:
                out[group.partition_path][file_slice.base_file.file_name] = file_slice.base_file.size
            for lf in file_slice.log_files:
                if not pending or not _pending_only(table, lf.location, pending):
                    out[group.partition_path][lf.file_name] = lf.size
    return dict(out)


def _pending_only(table: HudiTable, location: str, pending: set[str]) -> bool:
    """Whether every data or delete block of the log file was written by a pending instant."""
    written = set()
    for block in iter_log_blocks(table.storage, location, table=table.label):
        if isinstance(block, LogBlock) and block.block_type is not BlockType.COMMAND and block.instant_time:
            written.add(block.instant_time)
    return bool(written) and written <= pending
