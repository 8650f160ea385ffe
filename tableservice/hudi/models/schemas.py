"""Which writer schema each kind of timeline file gets, by table version.

| kind | v6 (Hudi 0.14/0.15) | v8 / v9 (Hudi 1.x) |
|---|---|---|
| commit / replace commit metadata | JSON (no Avro schema) | `COMMIT_METADATA` / `REPLACE_COMMIT_METADATA` |
| compaction plan | `COMPACTION_PLAN_V6` | `COMPACTION_PLAN` |
| requested replace (clustering plan) | `REQUESTED_REPLACE_METADATA_V6` | `REQUESTED_REPLACE_METADATA` |
| rollback plan / metadata | `ROLLBACK_PLAN` / `ROLLBACK_METADATA` | same |
| index plan / commit metadata | `INDEX_PLAN` / `INDEX_COMMIT_METADATA` | same |
| cleaner plan / clean metadata / savepoint | `CLEANER_PLAN` / `CLEAN_METADATA` / `SAVEPOINT_METADATA` | same |
| restore plan / metadata | `RESTORE_PLAN` / `RESTORE_METADATA_V6` | `RESTORE_PLAN` / `RESTORE_METADATA` |
"""

from __future__ import annotations

import enum
from typing import Any, Final

from tableservice.errors import UnsupportedTableError
from tableservice.hudi.models.avsc_builders import schema_full_name
from tableservice.hudi.models.schemas_commit import (
    COMMIT_METADATA,
    COMPACTION_PLAN,
    COMPACTION_PLAN_V6,
    REPLACE_COMMIT_METADATA,
    REQUESTED_REPLACE_METADATA,
    REQUESTED_REPLACE_METADATA_V6,
)
from tableservice.hudi.models.schemas_services import (
    ARCHIVED_META_ENTRY,
    CLEAN_METADATA,
    CLEANER_PLAN,
    INDEX_COMMIT_METADATA,
    INDEX_PLAN,
    LSM_TIMELINE_INSTANT,
    RESTORE_METADATA,
    RESTORE_METADATA_V6,
    RESTORE_PLAN,
    ROLLBACK_METADATA,
    ROLLBACK_PLAN,
    SAVEPOINT_METADATA,
)

SUPPORTED_TABLE_VERSIONS: Final = (6, 8, 9)
JSON_COMMIT_TABLE_VERSIONS: Final = (6,)


class Kind(enum.StrEnum):
    """A kind of timeline content, named after Hudi's Avro record."""

    COMMIT_METADATA = "HoodieCommitMetadata"
    REPLACE_COMMIT_METADATA = "HoodieReplaceCommitMetadata"
    COMPACTION_PLAN = "HoodieCompactionPlan"
    REQUESTED_REPLACE_METADATA = "HoodieRequestedReplaceMetadata"
    CLEANER_PLAN = "HoodieCleanerPlan"
    CLEAN_METADATA = "HoodieCleanMetadata"
    ROLLBACK_PLAN = "HoodieRollbackPlan"
    ROLLBACK_METADATA = "HoodieRollbackMetadata"
    INDEX_PLAN = "HoodieIndexPlan"
    INDEX_COMMIT_METADATA = "HoodieIndexCommitMetadata"
    SAVEPOINT_METADATA = "HoodieSavepointMetadata"
    RESTORE_PLAN = "HoodieRestorePlan"
    RESTORE_METADATA = "HoodieRestoreMetadata"
    ARCHIVED_META_ENTRY = "HoodieArchivedMetaEntry"
    LSM_TIMELINE_INSTANT = "HoodieLSMTimelineInstant"

    @property
    def full_name(self) -> str:
        return f"org.apache.hudi.avro.model.{self.value}"


_V8: dict[Kind, dict[str, Any]] = {
    Kind.COMMIT_METADATA: COMMIT_METADATA,
    Kind.REPLACE_COMMIT_METADATA: REPLACE_COMMIT_METADATA,
    Kind.COMPACTION_PLAN: COMPACTION_PLAN,
    Kind.REQUESTED_REPLACE_METADATA: REQUESTED_REPLACE_METADATA,
    Kind.CLEANER_PLAN: CLEANER_PLAN,
    Kind.CLEAN_METADATA: CLEAN_METADATA,
    Kind.ROLLBACK_PLAN: ROLLBACK_PLAN,
    Kind.ROLLBACK_METADATA: ROLLBACK_METADATA,
    Kind.INDEX_PLAN: INDEX_PLAN,
    Kind.INDEX_COMMIT_METADATA: INDEX_COMMIT_METADATA,
    Kind.SAVEPOINT_METADATA: SAVEPOINT_METADATA,
    Kind.RESTORE_PLAN: RESTORE_PLAN,
    Kind.RESTORE_METADATA: RESTORE_METADATA,
    Kind.LSM_TIMELINE_INSTANT: LSM_TIMELINE_INSTANT,
}
_V6: dict[Kind, dict[str, Any]] = {
    **{k: v for k, v in _V8.items() if k is not Kind.LSM_TIMELINE_INSTANT},
    Kind.COMPACTION_PLAN: COMPACTION_PLAN_V6,
    Kind.REQUESTED_REPLACE_METADATA: REQUESTED_REPLACE_METADATA_V6,
    Kind.ARCHIVED_META_ENTRY: ARCHIVED_META_ENTRY,
    Kind.RESTORE_METADATA: RESTORE_METADATA_V6,
}


def check_table_version(table_version: int) -> None:
    if table_version not in SUPPORTED_TABLE_VERSIONS:
        supported = ", ".join(map(str, SUPPORTED_TABLE_VERSIONS))
        raise UnsupportedTableError(f"table version {table_version} is not supported (supported: {supported})")


def writer_schema(kind: Kind, table_version: int) -> dict[str, Any]:
    """The Avro writer schema Hudi uses for `kind` in tables of `table_version`."""
    check_table_version(table_version)
    table = _V6 if table_version == 6 else _V8
    schema = table.get(kind)
    if schema is None:
        raise UnsupportedTableError(f"table version {table_version} has no {kind.value} files")
    return schema


def all_writer_schemas() -> dict[str, dict[str, Any]]:
    """Every schema this package writes, keyed `<version class>/<record name>` (for tests and tooling)."""
    out: dict[str, dict[str, Any]] = {}
    for label, table in (("v6", _V6), ("v8", _V8)):
        for kind, schema in table.items():
            assert schema_full_name(schema) == kind.full_name
            out[f"{label}/{kind.value}"] = schema
    return out
