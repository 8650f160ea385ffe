"""Archived timeline records.

- v6: `HoodieArchivedMetaEntry`, one Avro record per archived instant file inside the Avro data blocks of
  `.hoodie/archived/.commits_.archive.<n>_<token>` (a Hudi log file; the block header carries the schema
  `ARCHIVED_META_ENTRY`). The entry embeds the instant file's content in the field for its action.
- v8/v9: `HoodieLSMTimelineInstant`, one row per completed instant in the history Parquet files; `metadata`
  and `plan` hold the raw bytes of the completed file and of the plan.

`build_archived_meta_entry` converts one v6 instant file the way Hudi 0.14/0.15 do when archiving
(MetadataConversionUtils): commit metadata goes in as Avro with `extraMetadata["ROLLING_STAT"]` blanked and
operation COMPACT when `compacted`; `actionState` is the state's upper-case name.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from tableservice.errors import InvalidPlanError
from tableservice.hudi.models.base import AvroInt, AvroLong, HudiModel
from tableservice.hudi.models.clean import HoodieCleanerPlan, HoodieCleanMetadata
from tableservice.hudi.models.clustering import HoodieRequestedReplaceMetadata
from tableservice.hudi.models.codec_base import validate_model
from tableservice.hudi.models.codecs import (
    decode_clean_metadata,
    decode_cleaner_plan,
    decode_compaction_plan,
    decode_index_commit_metadata,
    decode_requested_replace_metadata,
    decode_rollback_metadata,
    decode_savepoint_metadata,
)
from tableservice.hudi.models.codecs_commit import decode_commit_metadata, decode_replace_commit_metadata
from tableservice.hudi.models.commit import HoodieCommitMetadata, HoodieReplaceCommitMetadata, HoodieWriteStat
from tableservice.hudi.models.compaction import HoodieCompactionPlan
from tableservice.hudi.models.index import HoodieIndexCommitMetadata
from tableservice.hudi.models.rollback import HoodieRollbackMetadata
from tableservice.hudi.models.savepoint import HoodieSavepointMetadata


class HoodieCompactionWriteStat(HudiModel):
    """Deprecated (pre-0.5 compaction metadata); only read from old archives."""

    avro_name: ClassVar[str] = "HoodieCompactionWriteStat"

    partition_path: str | None
    total_log_records: AvroLong | None
    total_log_files: AvroLong | None
    total_updated_records_compacted: AvroLong | None
    hoodie_write_stat: HoodieWriteStat | None


class HoodieCompactionMetadata(HudiModel):
    avro_name: ClassVar[str] = "HoodieCompactionMetadata"

    partition_to_compaction_write_stats: dict[str, tuple[HoodieCompactionWriteStat, ...]] | None


class HoodieArchivedMetaEntry(HudiModel):
    avro_name: ClassVar[str] = "HoodieArchivedMetaEntry"

    hoodie_commit_metadata: HoodieCommitMetadata | None = None
    hoodie_clean_metadata: HoodieCleanMetadata | None = None
    hoodie_compaction_metadata: HoodieCompactionMetadata | None = None
    hoodie_rollback_metadata: HoodieRollbackMetadata | None = None
    hoodie_save_point_metadata: HoodieSavepointMetadata | None = None
    commit_time: str | None = None
    action_type: str | None = None
    version: AvroInt | None = 1
    hoodie_compaction_plan: HoodieCompactionPlan | None = None
    hoodie_cleaner_plan: HoodieCleanerPlan | None = None
    action_state: str | None = None
    hoodie_replace_commit_metadata: HoodieReplaceCommitMetadata | None = None
    hoodie_requested_replace_metadata: HoodieRequestedReplaceMetadata | None = None
    hoodie_inflight_replace_metadata: HoodieCommitMetadata | None = Field(
        default=None, alias="HoodieInflightReplaceMetadata"
    )
    hoodie_index_commit_metadata: HoodieIndexCommitMetadata | None = None
    state_transition_time: str | None = None

    def to_avro(self) -> dict[str, Any]:
        out = super().to_avro()
        # A commit metadata slot must hold exactly HoodieCommitMetadata's fields.
        for key in ("hoodieCommitMetadata", "HoodieInflightReplaceMetadata"):
            value = out.get(key)
            if isinstance(value, dict):
                value.pop("partitionToReplaceFileIds", None)
        return out


class HoodieLSMTimelineInstant(HudiModel):
    """A row of a v8/v9 history Parquet file."""

    avro_name: ClassVar[str] = "HoodieLSMTimelineInstant"

    instant_time: str | None = None
    completion_time: str | None = None
    action: str | None = None
    metadata: bytes | None = None
    plan: bytes | None = None
    version: AvroInt = 1


def _archived_commit_metadata(md: HoodieCommitMetadata) -> HoodieCommitMetadata:
    extra = dict(md.extra_metadata or {})
    extra["ROLLING_STAT"] = ""
    update: dict[str, Any] = {"extra_metadata": extra}
    if md.compacted:
        update["operation_type"] = "COMPACT"
    stats = md.partition_to_write_stats
    if stats is not None:
        update["partition_to_write_stats"] = {k: v for k, v in stats.items() if k is not None}
    return md.model_copy(update=update)


def build_archived_meta_entry(
    data: bytes,
    *,
    action: str,
    state: str | enum.Enum,
    instant_time: str,
    path: str,
    state_transition_time: str | None = None,
) -> HoodieArchivedMetaEntry:
    """The v6 archive record of one instant file (its bytes `data`), as Hudi 0.14/0.15 build it."""
    st = (state.name if isinstance(state, enum.Enum) else str(state)).upper()
    if st not in ("REQUESTED", "INFLIGHT", "COMPLETED"):
        raise InvalidPlanError(f"unknown instant state {state!r}", path=path)
    base: dict[str, Any] = {
        "commit_time": instant_time,
        "action_state": st,
        "action_type": str(action),
        "state_transition_time": state_transition_time,
    }
    action = str(action)
    if action == "clean":
        if st == "COMPLETED":
            base["hoodie_clean_metadata"] = decode_clean_metadata(data, path=path)
        else:
            base["hoodie_cleaner_plan"] = decode_cleaner_plan(data, path=path)
    elif action in ("commit", "deltacommit"):
        if data:
            base["hoodie_commit_metadata"] = _archived_commit_metadata(
                HoodieCommitMetadata.model_validate(decode_commit_metadata(data, path=path).to_avro())
            )
    elif action == "replacecommit":
        if st == "COMPLETED":
            replace = decode_replace_commit_metadata(data, path=path)
            base["hoodie_replace_commit_metadata"] = _archived_commit_metadata(replace)
        elif st == "INFLIGHT":
            if data:
                inflight = HoodieCommitMetadata.model_validate(decode_commit_metadata(data, path=path).to_avro())
                base["hoodie_inflight_replace_metadata"] = _archived_commit_metadata(inflight)
        elif data:
            base["hoodie_requested_replace_metadata"] = decode_requested_replace_metadata(data, path=path)
    elif action == "rollback":
        if st == "COMPLETED":
            base["hoodie_rollback_metadata"] = decode_rollback_metadata(data, path=path)
    elif action == "savepoint":
        if st == "COMPLETED":
            base["hoodie_save_point_metadata"] = decode_savepoint_metadata(data, path=path)
    elif action in ("compaction", "logcompaction"):
        if data:
            base["hoodie_compaction_plan"] = decode_compaction_plan(data, path=path)
    elif action == "indexing":
        if st == "COMPLETED":
            base["hoodie_index_commit_metadata"] = decode_index_commit_metadata(data, path=path)
    else:
        raise InvalidPlanError(f"action {action!r} cannot be archived", path=path)
    return HoodieArchivedMetaEntry(**base)


def archived_meta_entry_from_record(record: Mapping[str, Any], *, path: str) -> HoodieArchivedMetaEntry:
    """The model of one record read from a v6 archive block (resolved with the block's schema)."""
    return validate_model(HoodieArchivedMetaEntry, record, path=path, what="archived meta entry")
