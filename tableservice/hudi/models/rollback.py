"""Rollback plan (`HoodieRollbackPlan`, in `<t>.rollback.requested`) and rollback metadata
(`HoodieRollbackMetadata`, in the completed `<t>.rollback`). The same schemas in table versions 6, 8 and 9."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import ClassVar

from pydantic import Field

from tableservice.hudi.models.base import AvroInt, AvroLong, HudiModel


class HoodieInstantInfo(HudiModel):
    avro_name: ClassVar[str] = "HoodieInstantInfo"

    commit_time: str
    action: str


class HoodieRollbackRequest(HudiModel):
    """What to undo in one file group: files to delete, or (v6 MOR) log blocks to roll back by appending a
    command block. `fileId` and `latestBaseInstant` are "" for requests that only delete files."""

    avro_name: ClassVar[str] = "HoodieRollbackRequest"

    partition_path: str
    file_id: str | None = None
    latest_base_instant: str | None = None
    files_to_be_deleted: tuple[str, ...] = ()
    log_blocks_to_be_deleted: dict[str, AvroLong] | None = None


def rollback_requests(
    deletes: Mapping[str, Iterable[str]],
    appended: Mapping[tuple[str, str, str], Mapping[str, int]],
    *,
    no_blocks: dict[str, int] | None,
) -> tuple[HoodieRollbackRequest, ...]:
    """A rollback plan's requests: per partition the files to delete (`no_blocks` as their log blocks: `{}` in
    the data table's plans, null in the metadata table's), then per (partition, file id, base instant) the log
    files holding the instant's blocks (v6 MOR: rolled back by a command block), each with its size."""
    return (
        *(
            HoodieRollbackRequest(
                partition_path=p,
                file_id="",
                latest_base_instant="",
                files_to_be_deleted=tuple(sorted(v)),
                log_blocks_to_be_deleted=None if no_blocks is None else dict(no_blocks),
            )
            for p, v in sorted(deletes.items())
        ),
        *(
            HoodieRollbackRequest(
                partition_path=p,
                file_id=fid,
                latest_base_instant=base,
                files_to_be_deleted=(),
                log_blocks_to_be_deleted=dict(sorted(blocks.items())),
            )
            for (p, fid, base), blocks in sorted(appended.items())
        ),
    )


class HoodieRollbackPlan(HudiModel):
    avro_name: ClassVar[str] = "HoodieRollbackPlan"

    instant_to_rollback: HoodieInstantInfo | None = None
    rollback_requests: tuple[HoodieRollbackRequest, ...] | None = Field(default=None, alias="RollbackRequests")
    version: AvroInt | None = 1


class HoodieRollbackPartitionMetadata(HudiModel):
    avro_name: ClassVar[str] = "HoodieRollbackPartitionMetadata"

    partition_path: str
    success_delete_files: tuple[str, ...]
    failed_delete_files: tuple[str, ...]
    rollback_log_files: dict[str, AvroLong] | None = None
    log_files_from_failed_commit: dict[str, AvroLong] | None = None


class HoodieRollbackMetadata(HudiModel):
    avro_name: ClassVar[str] = "HoodieRollbackMetadata"

    start_rollback_time: str
    time_taken_in_millis: AvroLong
    total_files_deleted: AvroInt
    commits_rollback: tuple[str, ...]
    partition_metadata: dict[str, HoodieRollbackPartitionMetadata]
    version: AvroInt | None = 1
    instants_rollback: tuple[HoodieInstantInfo, ...] = ()
