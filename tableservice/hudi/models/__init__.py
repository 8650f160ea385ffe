"""Frozen pydantic models and codecs for every Hudi timeline metadata file.

Decoders take the file's bytes and its path (for errors) and accept what older and newer Hudi writers wrote;
encoders take a model and the table version and write what Hudi of that version writes (JSON commit metadata
in table version 6, Avro containers everywhere else). Errors: InvalidPlanError naming the file.
"""

from __future__ import annotations

from tableservice.hudi.models.archive_entry import (
    HoodieArchivedMetaEntry,
    HoodieCompactionMetadata,
    HoodieCompactionWriteStat,
    HoodieLSMTimelineInstant,
    archived_meta_entry_from_record,
    build_archived_meta_entry,
)
from tableservice.hudi.models.avro_io import (
    is_avro_container,
    read_avro_container,
    read_avro_container_with_schema,
    write_avro_container,
)
from tableservice.hudi.models.avsc_builders import schema_to_json
from tableservice.hudi.models.base import HudiModel
from tableservice.hudi.models.clean import (
    HoodieActionInstant,
    HoodieCleanerPlan,
    HoodieCleanFileInfo,
    HoodieCleanMetadata,
    HoodieCleanPartitionMetadata,
)
from tableservice.hudi.models.clustering import (
    HoodieClusteringGroup,
    HoodieClusteringPlan,
    HoodieClusteringStrategy,
    HoodieRequestedReplaceMetadata,
    HoodieSliceInfo,
)
from tableservice.hudi.models.codecs import (
    TimelineContent,
    decode_clean_metadata,
    decode_cleaner_plan,
    decode_clustering_plan,
    decode_compaction_plan,
    decode_index_commit_metadata,
    decode_index_plan,
    decode_instant_content,
    decode_requested_replace_metadata,
    decode_restore_metadata,
    decode_restore_plan,
    decode_rollback_metadata,
    decode_rollback_plan,
    decode_savepoint_metadata,
    encode_clean_metadata,
    encode_cleaner_plan,
    encode_clustering_plan,
    encode_compaction_plan,
    encode_index_commit_metadata,
    encode_index_plan,
    encode_instant_content,
    encode_requested_replace_metadata,
    encode_restore_metadata,
    encode_restore_plan,
    encode_rollback_metadata,
    encode_rollback_plan,
    encode_savepoint_metadata,
)
from tableservice.hudi.models.codecs_commit import (
    commit_metadata_to_json_dict,
    decode_commit_metadata,
    decode_replace_commit_metadata,
    encode_commit_metadata,
    encode_replace_commit_metadata,
)
from tableservice.hudi.models.commit import (
    HoodieCommitMetadata,
    HoodieReplaceCommitMetadata,
    HoodieRuntimeStats,
    HoodieWriteStat,
)
from tableservice.hudi.models.compaction import (
    HoodieCompactionOperation,
    HoodieCompactionPlan,
    HoodieCompactionStrategy,
)
from tableservice.hudi.models.index import HoodieIndexCommitMetadata, HoodieIndexPartitionInfo, HoodieIndexPlan
from tableservice.hudi.models.restore import HoodieRestoreMetadata, HoodieRestorePlan
from tableservice.hudi.models.rollback import (
    HoodieInstantInfo,
    HoodieRollbackMetadata,
    HoodieRollbackPartitionMetadata,
    HoodieRollbackPlan,
    HoodieRollbackRequest,
)
from tableservice.hudi.models.savepoint import HoodieSavepointMetadata, HoodieSavepointPartitionMetadata
from tableservice.hudi.models.schemas import SUPPORTED_TABLE_VERSIONS, Kind, all_writer_schemas, writer_schema

__all__ = [
    "SUPPORTED_TABLE_VERSIONS",
    "HoodieActionInstant",
    "HoodieArchivedMetaEntry",
    "HoodieCleanFileInfo",
    "HoodieCleanMetadata",
    "HoodieCleanPartitionMetadata",
    "HoodieCleanerPlan",
    "HoodieClusteringGroup",
    "HoodieClusteringPlan",
    "HoodieClusteringStrategy",
    "HoodieCommitMetadata",
    "HoodieCompactionMetadata",
    "HoodieCompactionOperation",
    "HoodieCompactionPlan",
    "HoodieCompactionStrategy",
    "HoodieCompactionWriteStat",
    "HoodieIndexCommitMetadata",
    "HoodieIndexPartitionInfo",
    "HoodieIndexPlan",
    "HoodieInstantInfo",
    "HoodieLSMTimelineInstant",
    "HoodieReplaceCommitMetadata",
    "HoodieRequestedReplaceMetadata",
    "HoodieRestoreMetadata",
    "HoodieRestorePlan",
    "HoodieRollbackMetadata",
    "HoodieRollbackPartitionMetadata",
    "HoodieRollbackPlan",
    "HoodieRollbackRequest",
    "HoodieRuntimeStats",
    "HoodieSavepointMetadata",
    "HoodieSavepointPartitionMetadata",
    "HoodieSliceInfo",
    "HoodieWriteStat",
    "HudiModel",
    "Kind",
    "TimelineContent",
    "all_writer_schemas",
    "archived_meta_entry_from_record",
    "build_archived_meta_entry",
    "commit_metadata_to_json_dict",
    "decode_clean_metadata",
    "decode_cleaner_plan",
    "decode_clustering_plan",
    "decode_commit_metadata",
    "decode_compaction_plan",
    "decode_index_commit_metadata",
    "decode_index_plan",
    "decode_instant_content",
    "decode_replace_commit_metadata",
    "decode_requested_replace_metadata",
    "decode_restore_metadata",
    "decode_restore_plan",
    "decode_rollback_metadata",
    "decode_rollback_plan",
    "decode_savepoint_metadata",
    "encode_clean_metadata",
    "encode_cleaner_plan",
    "encode_clustering_plan",
    "encode_commit_metadata",
    "encode_compaction_plan",
    "encode_index_commit_metadata",
    "encode_index_plan",
    "encode_instant_content",
    "encode_replace_commit_metadata",
    "encode_requested_replace_metadata",
    "encode_restore_metadata",
    "encode_restore_plan",
    "encode_rollback_metadata",
    "encode_rollback_plan",
    "encode_savepoint_metadata",
    "is_avro_container",
    "read_avro_container",
    "read_avro_container_with_schema",
    "schema_to_json",
    "write_avro_container",
    "writer_schema",
]
