"""Undoing log blocks in place (table version 6 and its metadata tables): log files are named by their slice's
base instant and hold blocks of several instants, so a rollback cannot delete the blocks of one instant. It
finds the files holding that instant's blocks and appends a rollback command block (target = the instant) to
the slice, in a new log file of the next version with write token `1-0-1`, as Hudi's rollback does on storage
that cannot append. Readers drop every block of the target wherever it sits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tableservice.errors import TableServiceError
from tableservice.hudi.file_group.filenames import LogFileName, parse_log_file_name
from tableservice.hudi.file_group.log_format import (
    BlockType,
    LogBlock,
    append_log_blocks,
    encode_command_block,
    iter_log_blocks,
    rollback_header,
)
from tableservice.hudi.models.rollback import HoodieRollbackPartitionMetadata
from tableservice.storage import FileInfo, Storage, join

ROLLBACK_WRITE_TOKEN = "1-0-1"


def has_blocks_of(storage: Storage, location: str, instant_time: str, *, table: str | None = None) -> bool:
    """Whether the log file holds a data or delete block written at `instant_time` (an unreadable file: no)."""
    try:
        for block in iter_log_blocks(storage, location, table=table):
            if not isinstance(block, LogBlock) or block.block_type is BlockType.COMMAND:
                continue
            if block.instant_time == instant_time:
                return True
    except TableServiceError:
        return False
    return False


def next_log_version(listing: list[FileInfo], file_id: str, base_instant: str) -> int:
    """The version a new log file of the slice (file id, base instant) takes: one above the highest present."""
    versions = [0]
    for fi in listing:
        name = parse_log_file_name(fi.name)
        if name is not None and name.file_id == file_id and name.instant_time == base_instant:
            versions.append(name.version)
    return max(versions) + 1


def append_rollback_block(
    storage: Storage, folder: str, file_id: str, base_instant: str, rollback_time: str, target: str
) -> tuple[str, int]:
    """Write a rollback command block for `target` into a new log file of the slice; (its location, its size)."""
    version = next_log_version(storage.list(folder), file_id, base_instant)
    location = join(folder, LogFileName(file_id, base_instant, version, ROLLBACK_WRITE_TOKEN).name)
    block = encode_command_block(rollback_header(rollback_time, target))
    append_log_blocks(storage, location, [block], create_only=True)
    return location, len(block)


def undo_writes(
    storage: Storage,
    base_path: str,
    deletes: Mapping[str, Sequence[str]],
    appended: Mapping[tuple[str, str, str], Mapping[str, int]],
    *,
    rollback_time: str,
    target_time: str,
) -> dict[str, HoodieRollbackPartitionMetadata]:
    """Carry out a rollback plan's requests (`rollback_requests`' inputs): delete the files per partition, append a
    rollback command block to each slice whose log files hold the target's blocks; the rollback metadata's
    partitions (deleted files, command-block log files with their sizes, the failed commit's log files)."""
    partitions: dict[str, HoodieRollbackPartitionMetadata] = {}
    for p, locations in sorted(deletes.items()):
        for location in locations:
            storage.delete(location)
        partitions[p] = HoodieRollbackPartitionMetadata(
            partition_path=p, success_delete_files=tuple(sorted(locations)), failed_delete_files=()
        )
    for (p, fid, base), logs in sorted(appended.items()):
        folder = join(base_path, p) if p else base_path
        written, size = append_rollback_block(storage, folder, fid, base, rollback_time, target_time)
        previous = partitions.get(p)
        partitions[p] = HoodieRollbackPartitionMetadata(
            partition_path=p,
            success_delete_files=previous.success_delete_files if previous else (),
            failed_delete_files=(),
            rollback_log_files={**((previous.rollback_log_files or {}) if previous else {}), written: size},
            log_files_from_failed_commit={
                **((previous.log_files_from_failed_commit or {}) if previous else {}),
                **logs,
            },
        )
    return partitions
