"""Writer schemas for clean, rollback, indexing and savepoint metadata, the v6 archive entry and the v8+ LSM
history row, in Hudi's field order.

Rollback and indexing schemas reproduce the text real files embed (checked by the tests). Clean, savepoint,
archive and LSM schemas occur in no fixture; they follow `hudi-common/src/main/avro/` of Apache Hudi
(HoodieCleanerPlan / HoodieCleanMetadata with `lastCompletedCommitTimestamp` and `extraMetadata`,
HoodieSavepointMetadata with `version`, HoodieArchivedMetaEntry with `stateTransitionTime`) written out the
way Java's generated classes serialize them.
"""

from __future__ import annotations

from typing import Any

from tableservice.hudi.models.avsc_builders import (
    array,
    extra_metadata_field,
    field,
    map_of,
    opt,
    opt_prim,
    opt_str,
    record,
    string,
    string_array,
    top_level,
    version_field,
)
from tableservice.hudi.models.schemas_commit import (
    commit_metadata_record,
    compaction_plan_record,
    replace_commit_metadata_record,
    requested_replace_metadata_record,
    write_stat_record,
)

# --- rollback -----------------------------------------------------------------------------------------------


def _instant_info() -> dict[str, Any]:
    return record("HoodieInstantInfo", [field("commitTime", string()), field("action", string())])


def rollback_plan_record() -> dict[str, Any]:
    request = record(
        "HoodieRollbackRequest",
        [
            field("partitionPath", string()),
            opt_str("fileId"),
            opt_str("latestBaseInstant"),
            field("filesToBeDeleted", string_array({"default": []}), default=[]),
            field("logBlocksToBeDeleted", opt(map_of("long")), default=None),
        ],
    )
    return record(
        "HoodieRollbackPlan",
        [
            field(
                "instantToRollback",
                opt(_instant_info()),
                doc="Hoodie instant that needs to be rolled back",
                default=None,
            ),
            field("RollbackRequests", opt(array(request)), default=None),
            version_field(),
        ],
    )


def rollback_metadata_record() -> dict[str, Any]:
    partition = record(
        "HoodieRollbackPartitionMetadata",
        [
            field("partitionPath", string()),
            field("successDeleteFiles", string_array()),
            field("failedDeleteFiles", string_array()),
            field("rollbackLogFiles", opt(map_of("long")), default=None),
            field("logFilesFromFailedCommit", opt(map_of("long")), default=None),
        ],
    )
    return record(
        "HoodieRollbackMetadata",
        [
            field("startRollbackTime", string()),
            field("timeTakenInMillis", "long"),
            field("totalFilesDeleted", "int"),
            field("commitsRollback", string_array()),
            field("partitionMetadata", map_of(partition)),
            version_field(),
            field("instantsRollback", array(_instant_info(), props={"default": []}), default=[]),
        ],
    )


ROLLBACK_PLAN: dict[str, Any] = top_level(rollback_plan_record())
"""`HoodieRollbackPlan`, the same text in table versions 6, 8 and 9."""

ROLLBACK_METADATA: dict[str, Any] = top_level(rollback_metadata_record())
"""`HoodieRollbackMetadata`, the same text in table versions 6, 8 and 9."""


# --- restore ------------------------------------------------------------------------------------------------


def restore_plan_record() -> dict[str, Any]:
    return record(
        "HoodieRestorePlan",
        [
            field("instantsToRollback", array(_instant_info(), props={"default": None}), default=[]),
            field("version", ["int", "null"], default=2),
            opt_str("savepointToRestoreTimestamp"),
        ],
    )


def restore_metadata_record(*, with_extra_metadata: bool) -> dict[str, Any]:
    rollbacks = array(opt(rollback_metadata_record()), props={"default": None, "name": "hoodieRollbackMetadata"})
    fields = [
        field("startRestoreTime", string()),
        field("timeTakenInMillis", "long"),
        field("instantsToRollback", string_array()),
        field("hoodieRestoreMetadata", map_of(rollbacks)),
        version_field(),
        field("restoreInstantInfo", array(_instant_info(), props={"default": None}), default=[]),
    ]
    if with_extra_metadata:
        fields.append(extra_metadata_field())
    return record("HoodieRestoreMetadata", fields)


RESTORE_PLAN: dict[str, Any] = top_level(restore_plan_record())
"""`HoodieRestorePlan` with `savepointToRestoreTimestamp` (plan version 2, written by Hudi 0.14 on)."""

RESTORE_METADATA_V6: dict[str, Any] = top_level(restore_metadata_record(with_extra_metadata=False))
"""`HoodieRestoreMetadata` of Hudi 0.14/0.15 (no `extraMetadata`)."""

RESTORE_METADATA: dict[str, Any] = top_level(restore_metadata_record(with_extra_metadata=True))
"""`HoodieRestoreMetadata` of Hudi 1.x (with `extraMetadata`)."""


# --- indexing -----------------------------------------------------------------------------------------------

_INDEX_VERSION_DOC = "This field replaces the field filesToBeDeletedPerPartition"


def _index_partition_info() -> dict[str, Any]:
    return record(
        "HoodieIndexPartitionInfo",
        [version_field(), opt_str("metadataPartitionPath"), opt_str("indexUptoInstant"), extra_metadata_field()],
    )


def index_plan_record() -> dict[str, Any]:
    return record(
        "HoodieIndexPlan",
        [version_field(), field("indexPartitionInfos", opt(array(_index_partition_info())), default=None)],
    )


def index_commit_metadata_record() -> dict[str, Any]:
    return record(
        "HoodieIndexCommitMetadata",
        [
            version_field(doc=_INDEX_VERSION_DOC),
            opt_str("operationType", doc=_INDEX_VERSION_DOC),
            field(
                "indexPartitionInfos",
                opt(array(_index_partition_info())),
                doc="This field contains the info for each partition that got indexed",
                default=None,
            ),
        ],
    )


INDEX_PLAN: dict[str, Any] = top_level(index_plan_record())
"""`HoodieIndexPlan` as Hudi 1.x embeds it."""

INDEX_COMMIT_METADATA: dict[str, Any] = top_level(index_commit_metadata_record())
"""`HoodieIndexCommitMetadata` as Hudi 1.x embeds it."""


# --- clean --------------------------------------------------------------------------------------------------


def cleaner_plan_record() -> dict[str, Any]:
    action_instant = record(
        "HoodieActionInstant",
        [field("timestamp", string()), field("action", string()), field("state", string())],
    )
    file_info = record(
        "HoodieCleanFileInfo",
        [opt_str("filePath"), opt_prim("isBootstrapBaseFile", "boolean")],
    )
    return record(
        "HoodieCleanerPlan",
        [
            field("earliestInstantToRetain", opt(action_instant), default=None),
            field("lastCompletedCommitTimestamp", string(), default=""),
            field("policy", string()),
            field("filesToBeDeletedPerPartition", opt(map_of(string_array())), default=None),
            version_field(),
            field(
                "filePathsToBeDeletedPerPartition",
                opt(map_of(array(file_info))),
                doc="This field replaces the field filesToBeDeletedPerPartition",
                default=None,
            ),
            field("partitionsToBeDeleted", opt(string_array()), doc="partitions to be deleted", default=None),
            extra_metadata_field(map_props={"default": None}),
        ],
    )


def _clean_partition_metadata() -> dict[str, Any]:
    return record(
        "HoodieCleanPartitionMetadata",
        [
            field("partitionPath", string()),
            field("policy", string()),
            field("deletePathPatterns", string_array()),
            field("successDeleteFiles", string_array()),
            field("failedDeleteFiles", string_array()),
            opt_prim("isPartitionDeleted", "boolean"),
        ],
    )


def clean_metadata_record() -> dict[str, Any]:
    return record(
        "HoodieCleanMetadata",
        [
            field("startCleanTime", string()),
            field("timeTakenInMillis", "long"),
            field("totalFilesDeleted", "int"),
            field("earliestCommitToRetain", string()),
            field("lastCompletedCommitTimestamp", string(), default=""),
            field("partitionMetadata", map_of(_clean_partition_metadata())),
            version_field(),
            field(
                "bootstrapPartitionMetadata",
                opt(map_of(_clean_partition_metadata(), props={"default": None})),
                default=None,
            ),
            extra_metadata_field(map_props={"default": None}),
        ],
    )


CLEANER_PLAN: dict[str, Any] = top_level(cleaner_plan_record())
"""`HoodieCleanerPlan` (all table versions; from Hudi's source, no fixture holds one)."""

CLEAN_METADATA: dict[str, Any] = top_level(clean_metadata_record())
"""`HoodieCleanMetadata` (all table versions; from Hudi's source, no fixture holds one)."""


# --- savepoint ----------------------------------------------------------------------------------------------


def savepoint_metadata_record() -> dict[str, Any]:
    partition = record(
        "HoodieSavepointPartitionMetadata",
        [field("partitionPath", string()), field("savepointDataFile", string_array())],
    )
    return record(
        "HoodieSavepointMetadata",
        [
            field("savepointedBy", string()),
            field("savepointedAt", "long"),
            field("comments", string()),
            field("partitionMetadata", map_of(partition)),
            version_field(),
        ],
    )


SAVEPOINT_METADATA: dict[str, Any] = top_level(savepoint_metadata_record())
"""`HoodieSavepointMetadata` (all table versions; from Hudi's source, no fixture holds one)."""


# --- v6 archive entry ---------------------------------------------------------------------------------------


def _compaction_metadata() -> dict[str, Any]:
    stat = record(
        "HoodieCompactionWriteStat",
        [
            field("partitionPath", opt(string())),
            field("totalLogRecords", opt("long")),
            field("totalLogFiles", opt("long")),
            field("totalUpdatedRecordsCompacted", opt("long")),
            field("hoodieWriteStat", opt(write_stat_record())),
        ],
    )
    return record(
        "HoodieCompactionMetadata",
        [field("partitionToCompactionWriteStats", opt(map_of(array(stat))))],
    )


def archived_meta_entry_record() -> dict[str, Any]:
    def nested(name: str, rec: dict[str, Any]) -> dict[str, Any]:
        return field(name, opt(rec), default=None)

    return record(
        "HoodieArchivedMetaEntry",
        [
            nested("hoodieCommitMetadata", commit_metadata_record()),
            nested("hoodieCleanMetadata", clean_metadata_record()),
            nested("hoodieCompactionMetadata", _compaction_metadata()),
            nested("hoodieRollbackMetadata", rollback_metadata_record()),
            nested("hoodieSavePointMetadata", savepoint_metadata_record()),
            opt_str("commitTime"),
            opt_str("actionType"),
            version_field(),
            nested("hoodieCompactionPlan", compaction_plan_record(with_missing_partitions=False)),
            nested("hoodieCleanerPlan", cleaner_plan_record()),
            opt_str("actionState"),
            nested("hoodieReplaceCommitMetadata", replace_commit_metadata_record()),
            nested("hoodieRequestedReplaceMetadata", requested_replace_metadata_record(with_missing_partitions=False)),
            nested("HoodieInflightReplaceMetadata", commit_metadata_record()),
            nested("hoodieIndexCommitMetadata", index_commit_metadata_record()),
            opt_str("stateTransitionTime"),
        ],
    )


ARCHIVED_META_ENTRY: dict[str, Any] = top_level(archived_meta_entry_record())
"""`HoodieArchivedMetaEntry`, one record per archived instant file in a v6 `.commits_.archive.*` log file.
Composed from the schemas above (Hudi 0.14/0.15 field list with `stateTransitionTime`); repeated named types
are references after their first inline definition."""


# --- v8+ LSM history row ------------------------------------------------------------------------------------


def lsm_timeline_instant_record() -> dict[str, Any]:
    return record(
        "HoodieLSMTimelineInstant",
        [
            opt_str("instantTime"),
            opt_str("completionTime"),
            opt_str("action"),
            opt_prim("metadata", "bytes"),
            opt_prim("plan", "bytes"),
            field("version", "int", default=1),
        ],
    )


LSM_TIMELINE_INSTANT: dict[str, Any] = top_level(lsm_timeline_instant_record())
"""`HoodieLSMTimelineInstant`: the row of a v8/v9 history Parquet file."""
