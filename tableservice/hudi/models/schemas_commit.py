"""Writer schemas for commit metadata, compaction plans and clustering plans, in Hudi's field order.

Every schema here reproduces, byte for byte, the schema text that real Hudi files embed (checked by the tests
against the fixture tables), except `COMPACTION_PLAN_V6`, which no fixture holds (see its docstring).
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
    string_map,
    top_level,
    version_field,
)


def _runtime_stats() -> dict[str, Any]:
    return record(
        "HoodieRuntimeStats",
        [opt_prim("totalScanTime", "long"), opt_prim("totalCreateTime", "long"), opt_prim("totalUpsertTime", "long")],
    )


def write_stat_record() -> dict[str, Any]:
    """`HoodieWriteStat` as Hudi 1.x defines it (inside HoodieCommitMetadata)."""
    return record(
        "HoodieWriteStat",
        [
            opt_str("fileId"),
            opt_str("path"),
            opt_str("prevCommit"),
            opt_prim("numWrites", "long"),
            opt_prim("numDeletes", "long"),
            opt_prim("numUpdateWrites", "long"),
            opt_prim("totalWriteBytes", "long"),
            opt_prim("totalWriteErrors", "long"),
            opt_str("partitionPath"),
            opt_prim("totalLogRecords", "long"),
            opt_prim("totalLogFiles", "long"),
            opt_prim("totalUpdatedRecordsCompacted", "long"),
            opt_prim("numInserts", "long"),
            opt_prim("totalLogBlocks", "long"),
            opt_prim("totalCorruptLogBlock", "long"),
            opt_prim("totalRollbackBlocks", "long"),
            opt_prim("fileSizeInBytes", "long"),
            opt_prim("logVersion", "int"),
            opt_prim("logOffset", "long"),
            opt_str("baseFile"),
            field("logFiles", opt(string_array({"default": None})), default=None),
            field("cdcStats", opt(map_of("long", props={"default": None})), default=None),
            opt_str("prevBaseFile"),
            opt_prim("minEventTime", "long"),
            opt_prim("maxEventTime", "long"),
            field("runtimeStats", opt(_runtime_stats()), default=None),
            opt_prim("totalLogFilesCompacted", "long"),
            opt_prim("totalLogReadTimeMs", "long"),
            opt_prim("totalLogSizeCompacted", "long"),
            opt_str("tempPath"),
            opt_prim("numUpdates", "long"),
        ],
    )


def _commit_fields(*, extra_map_props: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [
        field("partitionToWriteStats", opt(map_of(array(write_stat_record()))), default=None),
        opt_prim("compacted", "boolean"),
        extra_metadata_field(map_props=extra_map_props),
        version_field(),
        opt_str("operationType"),
    ]


def commit_metadata_record() -> dict[str, Any]:
    return record("HoodieCommitMetadata", _commit_fields(extra_map_props={"default": None}))


def replace_commit_metadata_record() -> dict[str, Any]:
    fields = _commit_fields(extra_map_props=None)
    fields.append(field("partitionToReplaceFileIds", opt(map_of(string_array())), default=None))
    return record("HoodieReplaceCommitMetadata", fields)


COMMIT_METADATA: dict[str, Any] = top_level(commit_metadata_record())
"""`HoodieCommitMetadata`, as Hudi 1.0-1.2 embed it (table versions 8 and 9)."""

REPLACE_COMMIT_METADATA: dict[str, Any] = top_level(replace_commit_metadata_record())
"""`HoodieReplaceCommitMetadata`, as Hudi 1.0-1.2 embed it (table versions 8 and 9)."""


# --- compaction ---------------------------------------------------------------------------------------------

_COMPACTOR_DOC = (
    "The class name that is provided here should extend CompactionExecutionStrategy abstract class, idea is that "
    "the plan generator will also provide the execution strategy to use."
)
_STRATEGY_PARAMS_DOC = (
    "These parameters play a key role in determining which action type it is i.e. compaction or logcompaction and "
    "it will also include configs that determine how compaction needs to be executed."
)


def _compaction_operation() -> dict[str, Any]:
    return record(
        "HoodieCompactionOperation",
        [
            field("baseInstantTime", opt(string())),
            field("deltaFilePaths", opt(string_array()), default=None),
            opt_str("dataFilePath"),
            field("fileId", opt(string())),
            opt_str("partitionPath"),
            field("metrics", opt(map_of("double")), default=None),
            opt_str("bootstrapFilePath"),
        ],
    )


def _compaction_strategy() -> dict[str, Any]:
    return record(
        "HoodieCompactionStrategy",
        [
            opt_str("compactorClassName", doc=_COMPACTOR_DOC),
            field("strategyParams", opt(string_map()), doc=_STRATEGY_PARAMS_DOC, default=None),
            version_field(),
        ],
    )


def compaction_plan_record(*, with_missing_partitions: bool = True) -> dict[str, Any]:
    fields = [
        field("operations", opt(array(_compaction_operation())), default=None),
        extra_metadata_field(),
        version_field(),
        field("strategy", opt(_compaction_strategy()), default=None),
        field("preserveHoodieMetadata", ["boolean", "null"], default=False),
    ]
    if with_missing_partitions:
        fields.append(field("missingSchedulePartitions", opt(string_array()), default=None))
    return record("HoodieCompactionPlan", fields)


COMPACTION_PLAN: dict[str, Any] = top_level(compaction_plan_record())
"""`HoodieCompactionPlan` as Hudi 1.0-1.2 embed it (table versions 8 and 9)."""

COMPACTION_PLAN_V6: dict[str, Any] = top_level(compaction_plan_record(with_missing_partitions=False))
"""`HoodieCompactionPlan` for table version 6: the 1.x schema without `missingSchedulePartitions` (added with
incremental table-service planning in Hudi 1.x). No fixture holds a v6 compaction plan, so the exact 0.14/0.15
text is unverified; readers resolve by field name and every field has a default, so older and newer Hudi
readers accept it."""


# --- clustering / requested replace ---------------------------------------------------------------------


def _slice_info() -> dict[str, Any]:
    return record(
        "HoodieSliceInfo",
        [
            opt_str("dataFilePath"),
            field("deltaFilePaths", opt(string_array()), default=None),
            field("fileId", opt(string())),
            opt_str("partitionPath"),
            opt_str("bootstrapFilePath"),
            version_field(),
        ],
    )


def _clustering_group() -> dict[str, Any]:
    return record(
        "HoodieClusteringGroup",
        [
            field("slices", opt(array(_slice_info())), default=None),
            field("metrics", opt(map_of("double")), default=None),
            field("numOutputFileGroups", ["int", "null"], default=1),
            extra_metadata_field(),
            version_field(),
        ],
    )


def _clustering_strategy() -> dict[str, Any]:
    return record(
        "HoodieClusteringStrategy",
        [opt_str("strategyClassName"), field("strategyParams", opt(string_map()), default=None), version_field()],
    )


def clustering_plan_record(*, with_missing_partitions: bool = True) -> dict[str, Any]:
    fields = [
        field("inputGroups", opt(array(_clustering_group())), default=None),
        field("strategy", opt(_clustering_strategy()), default=None),
        extra_metadata_field(),
        version_field(),
        opt_prim("preserveHoodieMetadata", "boolean"),
    ]
    if with_missing_partitions:
        fields.append(field("missingSchedulePartitions", opt(string_array()), default=None))
    return record("HoodieClusteringPlan", fields)


def requested_replace_metadata_record(*, with_missing_partitions: bool = True) -> dict[str, Any]:
    return record(
        "HoodieRequestedReplaceMetadata",
        [
            opt_str("operationType"),
            field(
                "clusteringPlan",
                opt(clustering_plan_record(with_missing_partitions=with_missing_partitions)),
                default=None,
            ),
            extra_metadata_field(),
            version_field(),
        ],
    )


REQUESTED_REPLACE_METADATA: dict[str, Any] = top_level(requested_replace_metadata_record())
"""`HoodieRequestedReplaceMetadata` as Hudi 1.x embeds it (table versions 8 and 9)."""

REQUESTED_REPLACE_METADATA_V6: dict[str, Any] = top_level(
    requested_replace_metadata_record(with_missing_partitions=False)
)
"""`HoodieRequestedReplaceMetadata` as Hudi 0.14/0.15 embed it (table version 6)."""
