"""Rollback plan (`HoodieRollbackPlan`, in `<t>.rollback.requested`) and rollback metadata
(`HoodieRollbackMetadata`, in the completed `<t>.rollback`). The same schemas in table versions 6, 8 and 9."""

from __future__ import annotations

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
