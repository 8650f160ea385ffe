"""Commit metadata: what a commit, delta commit, replace commit or compaction wrote.

Table version 6 stores it as Jackson JSON of Hudi's Java classes, versions 8 and 9 as Avro
(`HoodieCommitMetadata` / `HoodieReplaceCommitMetadata`). One model serves both: its fields are the Avro
fields; JSON keys Hudi's Avro schema does not know (e.g. `recordsStats` of v6 delta write stats) are kept as
pydantic extras and written back to JSON.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import ConfigDict

from tableservice.hudi.models.base import AvroInt, AvroLong, HudiModel


class HoodieRuntimeStats(HudiModel):
    avro_name: ClassVar[str] = "HoodieRuntimeStats"

    total_scan_time: AvroLong | None = None
    total_create_time: AvroLong | None = None
    total_upsert_time: AvroLong | None = None


class HoodieWriteStat(HudiModel):
    """Statistics of one file written by one commit. Every Avro field is optional (default null)."""

    model_config = ConfigDict(extra="allow")
    avro_name: ClassVar[str] = "HoodieWriteStat"

    file_id: str | None = None
    path: str | None = None
    prev_commit: str | None = None
    num_writes: AvroLong | None = None
    num_deletes: AvroLong | None = None
    num_update_writes: AvroLong | None = None
    total_write_bytes: AvroLong | None = None
    total_write_errors: AvroLong | None = None
    partition_path: str | None = None
    total_log_records: AvroLong | None = None
    total_log_files: AvroLong | None = None
    total_updated_records_compacted: AvroLong | None = None
    num_inserts: AvroLong | None = None
    total_log_blocks: AvroLong | None = None
    total_corrupt_log_block: AvroLong | None = None
    total_rollback_blocks: AvroLong | None = None
    file_size_in_bytes: AvroLong | None = None
    log_version: AvroInt | None = None
    log_offset: AvroLong | None = None
    base_file: str | None = None
    log_files: tuple[str, ...] | None = None
    cdc_stats: dict[str, AvroLong] | None = None
    prev_base_file: str | None = None
    min_event_time: AvroLong | None = None
    max_event_time: AvroLong | None = None
    runtime_stats: HoodieRuntimeStats | None = None
    total_log_files_compacted: AvroLong | None = None
    total_log_read_time_ms: AvroLong | None = None
    total_log_size_compacted: AvroLong | None = None
    temp_path: str | None = None
    num_updates: AvroLong | None = None

    @property
    def json_extras(self) -> dict[str, object]:
        """Keys of the original JSON that Hudi's Avro schema does not have (kept for re-encoding)."""
        return dict(self.model_extra or {})


class HoodieCommitMetadata(HudiModel):
    """`HoodieCommitMetadata`: write stats by partition, plus `extraMetadata` (holds the writer `schema`)."""

    model_config = ConfigDict(extra="allow")
    avro_name: ClassVar[str] = "HoodieCommitMetadata"

    partition_to_write_stats: dict[str, tuple[HoodieWriteStat, ...]] | None = None
    compacted: bool | None = None
    extra_metadata: dict[str, str] | None = None
    version: AvroInt | None = 1
    operation_type: str | None = None

    @classmethod
    def empty(cls) -> HoodieCommitMetadata:
        """What Hudi makes of an empty commit file: no stats, not compacted, operation UNKNOWN."""
        return cls(partition_to_write_stats={}, compacted=False, extra_metadata={}, operation_type="UNKNOWN")

    def write_stats(self) -> list[HoodieWriteStat]:
        """Every write stat, partition by partition in file order."""
        return [s for stats in (self.partition_to_write_stats or {}).values() for s in stats]

    def file_ids(self) -> set[str]:
        """File ids written (empty ids of inflight placeholders left out)."""
        return {s.file_id for s in self.write_stats() if s.file_id}

    @property
    def table_schema(self) -> str | None:
        """The writer's Avro schema of the table (`extraMetadata["schema"]`), if recorded."""
        return (self.extra_metadata or {}).get("schema")

    @property
    def json_extras(self) -> dict[str, object]:
        return dict(self.model_extra or {})


class HoodieReplaceCommitMetadata(HoodieCommitMetadata):
    """`HoodieReplaceCommitMetadata`: commit metadata plus the file groups the commit replaced."""

    avro_name: ClassVar[str] = "HoodieReplaceCommitMetadata"

    partition_to_replace_file_ids: dict[str, tuple[str, ...]] | None = None

    @classmethod
    def empty(cls) -> HoodieReplaceCommitMetadata:
        return cls(
            partition_to_write_stats={},
            compacted=False,
            extra_metadata={},
            operation_type="UNKNOWN",
            partition_to_replace_file_ids={},
        )

    def replaced_file_ids(self) -> dict[str, tuple[str, ...]]:
        return dict(self.partition_to_replace_file_ids or {})
