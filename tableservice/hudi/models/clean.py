"""Clean plan (`HoodieCleanerPlan`, in `<t>.clean.requested`) and clean metadata (`HoodieCleanMetadata`, in the
completed `<t>.clean`). Plans hold absolute paths; clean metadata holds file names relative to the partition."""

from __future__ import annotations

from typing import ClassVar

from tableservice.hudi.models.base import AvroInt, AvroLong, HudiModel


class HoodieActionInstant(HudiModel):
    avro_name: ClassVar[str] = "HoodieActionInstant"

    timestamp: str
    action: str
    state: str


class HoodieCleanFileInfo(HudiModel):
    avro_name: ClassVar[str] = "HoodieCleanFileInfo"

    file_path: str | None = None
    is_bootstrap_base_file: bool | None = None


class HoodieCleanerPlan(HudiModel):
    avro_name: ClassVar[str] = "HoodieCleanerPlan"

    earliest_instant_to_retain: HoodieActionInstant | None = None
    last_completed_commit_timestamp: str = ""
    policy: str
    files_to_be_deleted_per_partition: dict[str, tuple[str, ...]] | None = None
    version: AvroInt | None = 1
    file_paths_to_be_deleted_per_partition: dict[str, tuple[HoodieCleanFileInfo, ...]] | None = None
    partitions_to_be_deleted: tuple[str, ...] | None = None
    extra_metadata: dict[str, str] | None = None


class HoodieCleanPartitionMetadata(HudiModel):
    avro_name: ClassVar[str] = "HoodieCleanPartitionMetadata"

    partition_path: str
    policy: str
    delete_path_patterns: tuple[str, ...]
    success_delete_files: tuple[str, ...]
    failed_delete_files: tuple[str, ...]
    is_partition_deleted: bool | None = None


class HoodieCleanMetadata(HudiModel):
    avro_name: ClassVar[str] = "HoodieCleanMetadata"

    start_clean_time: str
    time_taken_in_millis: AvroLong
    total_files_deleted: AvroInt
    earliest_commit_to_retain: str
    last_completed_commit_timestamp: str = ""
    partition_metadata: dict[str, HoodieCleanPartitionMetadata]
    version: AvroInt | None = 1
    bootstrap_partition_metadata: dict[str, HoodieCleanPartitionMetadata] | None = None
    extra_metadata: dict[str, str] | None = None
