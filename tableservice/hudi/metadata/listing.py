"""Listing a data table's files through the metadata table's `files` partition: one read of one file group
instead of a listing per partition (what makes large tables on S3 cheap)."""

from __future__ import annotations

from collections import defaultdict

from tableservice.hudi.metadata.keys import MetadataPartition
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.storage import FileInfo, join


def lists_through_metadata(table: HudiTable) -> bool:
    """Whether the table's `files` partition is built and readable, on a table version whose metadata table the
    daemon keeps in step (8 and 9; version 6 tables are listed from storage)."""
    return table.config.version >= 8 and MetadataPartition.FILES.value in table.config.metadata_partitions


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
    of a completed instant (every slice of every file group, replaced groups included until a clean)."""
    view = table.file_system_view(timeline=timeline, listing=table.list_storage_files())
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for group in view.all_file_groups():
        for file_slice in group.slices:
            if file_slice.base_file is not None:
                out[group.partition_path][file_slice.base_file.file_name] = file_slice.base_file.size
            for lf in file_slice.log_files:
                out[group.partition_path][lf.file_name] = lf.size
    return dict(out)
