"""Codecs for plans and table-service metadata: Avro containers in every table version.

Each `decode_*(data, *, path)` reads the first record of the container resolved with the embedded writer
schema (older writers' missing fields take Hudi's defaults) and checks the writer schema's record name; each
`encode_*(model, *, table_version)` writes one record with the schema Hudi uses for that table version (see
`schemas`). Wrong record names, damaged or empty bytes raise InvalidPlanError naming the file.
`decode_instant_content` picks the decoder from an instant's action and state.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Final

from tableservice.errors import InvalidPlanError
from tableservice.hudi.models.avro_io import write_avro_container
from tableservice.hudi.models.base import HudiModel
from tableservice.hudi.models.clean import HoodieCleanerPlan, HoodieCleanMetadata
from tableservice.hudi.models.clustering import HoodieClusteringPlan, HoodieRequestedReplaceMetadata
from tableservice.hudi.models.codec_base import decode_avro_model
from tableservice.hudi.models.codecs_commit import decode_commit_metadata, encode_commit_metadata
from tableservice.hudi.models.commit import HoodieCommitMetadata
from tableservice.hudi.models.compaction import HoodieCompactionPlan
from tableservice.hudi.models.index import HoodieIndexCommitMetadata, HoodieIndexPlan
from tableservice.hudi.models.restore import HoodieRestoreMetadata, HoodieRestorePlan
from tableservice.hudi.models.rollback import HoodieRollbackMetadata, HoodieRollbackPlan
from tableservice.hudi.models.savepoint import HoodieSavepointMetadata
from tableservice.hudi.models.schemas import Kind, writer_schema

TimelineContent = (
    HoodieCommitMetadata
    | HoodieRequestedReplaceMetadata
    | HoodieCompactionPlan
    | HoodieCleanerPlan
    | HoodieCleanMetadata
    | HoodieRollbackPlan
    | HoodieRollbackMetadata
    | HoodieIndexPlan
    | HoodieIndexCommitMetadata
    | HoodieSavepointMetadata
    | HoodieRestorePlan
    | HoodieRestoreMetadata
)


def _encode(model: HudiModel, kind: Kind, table_version: int) -> bytes:
    return write_avro_container([model.to_avro()], writer_schema(kind, table_version))


# --- compaction ----------------------------------------------------------------------------------------------


def decode_compaction_plan(data: bytes, *, path: str) -> HoodieCompactionPlan:
    """The plan of a `.compaction.requested` (or `.logcompaction.requested`) file."""
    return decode_avro_model(
        data, HoodieCompactionPlan, path=path, expected=[Kind.COMPACTION_PLAN.full_name], what="compaction plan"
    )


def encode_compaction_plan(plan: HoodieCompactionPlan, *, table_version: int) -> bytes:
    return _encode(plan, Kind.COMPACTION_PLAN, table_version)


# --- clustering / requested replace ---------------------------------------------------------------------------


def decode_requested_replace_metadata(data: bytes, *, path: str) -> HoodieRequestedReplaceMetadata:
    """A `.replacecommit.requested` or (v8/v9) `.clustering.requested` file. Empty bytes give a record with no
    plan, as Hudi treats an empty requested replace commit."""
    if not data:
        return HoodieRequestedReplaceMetadata(version=None)
    return decode_avro_model(
        data,
        HoodieRequestedReplaceMetadata,
        path=path,
        expected=[Kind.REQUESTED_REPLACE_METADATA.full_name],
        what="requested replace metadata",
    )


def decode_clustering_plan(data: bytes, *, path: str) -> HoodieClusteringPlan:
    """The clustering plan of a requested clustering (or v6 replacecommit) file; InvalidPlanError when the file
    holds no plan (an insert overwrite's requested file)."""
    requested = decode_requested_replace_metadata(data, path=path)
    if requested.clustering_plan is None:
        raise InvalidPlanError(
            f"requested replace metadata holds no clustering plan (operationType={requested.operation_type})",
            path=path,
        )
    return requested.clustering_plan


def encode_requested_replace_metadata(md: HoodieRequestedReplaceMetadata, *, table_version: int) -> bytes:
    return _encode(md, Kind.REQUESTED_REPLACE_METADATA, table_version)


def encode_clustering_plan(plan: HoodieClusteringPlan, *, table_version: int) -> bytes:
    """A requested clustering file: `HoodieRequestedReplaceMetadata` with operationType CLUSTER, version 1."""
    md = HoodieRequestedReplaceMetadata(operation_type="CLUSTER", clustering_plan=plan, extra_metadata={}, version=1)
    return encode_requested_replace_metadata(md, table_version=table_version)


# --- clean ----------------------------------------------------------------------------------------------------


def decode_cleaner_plan(data: bytes, *, path: str) -> HoodieCleanerPlan:
    return decode_avro_model(
        data, HoodieCleanerPlan, path=path, expected=[Kind.CLEANER_PLAN.full_name], what="cleaner plan"
    )


def encode_cleaner_plan(plan: HoodieCleanerPlan, *, table_version: int) -> bytes:
    return _encode(plan, Kind.CLEANER_PLAN, table_version)


def decode_clean_metadata(data: bytes, *, path: str) -> HoodieCleanMetadata:
    return decode_avro_model(
        data, HoodieCleanMetadata, path=path, expected=[Kind.CLEAN_METADATA.full_name], what="clean metadata"
    )


def encode_clean_metadata(md: HoodieCleanMetadata, *, table_version: int) -> bytes:
    return _encode(md, Kind.CLEAN_METADATA, table_version)


# --- rollback -------------------------------------------------------------------------------------------------


def decode_rollback_plan(data: bytes, *, path: str) -> HoodieRollbackPlan:
    return decode_avro_model(
        data, HoodieRollbackPlan, path=path, expected=[Kind.ROLLBACK_PLAN.full_name], what="rollback plan"
    )


def encode_rollback_plan(plan: HoodieRollbackPlan, *, table_version: int) -> bytes:
    return _encode(plan, Kind.ROLLBACK_PLAN, table_version)


def decode_rollback_metadata(data: bytes, *, path: str) -> HoodieRollbackMetadata:
    return decode_avro_model(
        data, HoodieRollbackMetadata, path=path, expected=[Kind.ROLLBACK_METADATA.full_name], what="rollback metadata"
    )


def encode_rollback_metadata(md: HoodieRollbackMetadata, *, table_version: int) -> bytes:
    return _encode(md, Kind.ROLLBACK_METADATA, table_version)


# --- indexing -------------------------------------------------------------------------------------------------


def decode_index_plan(data: bytes, *, path: str) -> HoodieIndexPlan:
    return decode_avro_model(data, HoodieIndexPlan, path=path, expected=[Kind.INDEX_PLAN.full_name], what="index plan")


def encode_index_plan(plan: HoodieIndexPlan, *, table_version: int) -> bytes:
    return _encode(plan, Kind.INDEX_PLAN, table_version)


def decode_index_commit_metadata(data: bytes, *, path: str) -> HoodieIndexCommitMetadata:
    return decode_avro_model(
        data,
        HoodieIndexCommitMetadata,
        path=path,
        expected=[Kind.INDEX_COMMIT_METADATA.full_name],
        what="index commit metadata",
    )


def encode_index_commit_metadata(md: HoodieIndexCommitMetadata, *, table_version: int) -> bytes:
    return _encode(md, Kind.INDEX_COMMIT_METADATA, table_version)


# --- savepoint ------------------------------------------------------------------------------------------------


def decode_savepoint_metadata(data: bytes, *, path: str) -> HoodieSavepointMetadata:
    return decode_avro_model(
        data,
        HoodieSavepointMetadata,
        path=path,
        expected=[Kind.SAVEPOINT_METADATA.full_name],
        what="savepoint metadata",
    )


def encode_savepoint_metadata(md: HoodieSavepointMetadata, *, table_version: int) -> bytes:
    return _encode(md, Kind.SAVEPOINT_METADATA, table_version)


# --- restore --------------------------------------------------------------------------------------------------


def decode_restore_plan(data: bytes, *, path: str) -> HoodieRestorePlan:
    return decode_avro_model(
        data, HoodieRestorePlan, path=path, expected=[Kind.RESTORE_PLAN.full_name], what="restore plan"
    )


def encode_restore_plan(plan: HoodieRestorePlan, *, table_version: int) -> bytes:
    return _encode(plan, Kind.RESTORE_PLAN, table_version)


def decode_restore_metadata(data: bytes, *, path: str) -> HoodieRestoreMetadata:
    return decode_avro_model(
        data, HoodieRestoreMetadata, path=path, expected=[Kind.RESTORE_METADATA.full_name], what="restore metadata"
    )


def encode_restore_metadata(md: HoodieRestoreMetadata, *, table_version: int) -> bytes:
    """Table version 6 files carry no `extraMetadata` (Hudi 0.14/0.15's schema); it is dropped there."""
    if table_version < 8:
        record = md.to_avro()
        record.pop("extraMetadata", None)
        return write_avro_container([record], writer_schema(Kind.RESTORE_METADATA, table_version))
    return _encode(md, Kind.RESTORE_METADATA, table_version)


# --- by action and state --------------------------------------------------------------------------------------

_COMMIT_ACTIONS: Final = frozenset({"commit", "deltacommit"})
# (action, completed?) -> decoder for files that are not commit metadata. Non-completed states share the plan.
_Decoder = Callable[..., TimelineContent]
_PLAN_DECODERS: Final[dict[str, _Decoder]] = {
    "compaction": decode_compaction_plan,
    "logcompaction": decode_compaction_plan,
    "clustering": decode_requested_replace_metadata,
    "clean": decode_cleaner_plan,
    "rollback": decode_rollback_plan,
    "indexing": decode_index_plan,
    "savepoint": decode_savepoint_metadata,
    "restore": decode_restore_plan,
}
_COMPLETED_DECODERS: Final[dict[str, _Decoder]] = {
    "clean": decode_clean_metadata,
    "rollback": decode_rollback_metadata,
    "indexing": decode_index_commit_metadata,
    "savepoint": decode_savepoint_metadata,
    "restore": decode_restore_metadata,
}


def encode_instant_content(md: TimelineContent, *, table_version: int) -> bytes:
    """The bytes of a completed instant's file for its metadata model (commit, replace, clean, rollback,
    savepoint, indexing)."""
    if isinstance(md, HoodieCommitMetadata):
        return encode_commit_metadata(md, table_version=table_version)
    if isinstance(md, HoodieCleanMetadata):
        return encode_clean_metadata(md, table_version=table_version)
    if isinstance(md, HoodieRollbackMetadata):
        return encode_rollback_metadata(md, table_version=table_version)
    if isinstance(md, HoodieSavepointMetadata):
        return encode_savepoint_metadata(md, table_version=table_version)
    if isinstance(md, HoodieIndexCommitMetadata):
        return encode_index_commit_metadata(md, table_version=table_version)
    if isinstance(md, HoodieRestoreMetadata):
        return encode_restore_metadata(md, table_version=table_version)
    raise InvalidPlanError(f"{type(md).__name__} is not the content of a completed instant")


def _state_name(state: str | enum.Enum) -> str:
    name = state.name if isinstance(state, enum.Enum) else str(state)
    return name.lower()


def decode_instant_content(data: bytes, *, action: str, state: str | enum.Enum, path: str) -> TimelineContent | None:
    """The content of one timeline file, chosen by its instant's action and state (`requested`, `inflight` or
    `completed`, or an enum with those names).

    Commit, deltacommit and replacecommit files (except requested replace commits) give commit metadata, an
    empty file an empty one. Requested replace commits and requested clustering give the requested replace
    metadata. Other empty files (inflight compaction, clustering, rollback... and requested commits) give None.
    """
    action = str(action)
    st = _state_name(state)
    if st not in ("requested", "inflight", "completed"):
        raise InvalidPlanError(f"unknown instant state {state!r}", path=path)
    if action in _COMMIT_ACTIONS:
        return None if (st == "requested" and not data) else decode_commit_metadata(data, path=path)
    if action == "replacecommit":
        if st == "requested":
            return decode_requested_replace_metadata(data, path=path)
        return decode_commit_metadata(data, path=path)
    if st == "completed":
        completed = _COMPLETED_DECODERS.get(action)
        if completed is None:
            raise InvalidPlanError(f"no completed file is modelled for action {action!r}", path=path)
        return completed(data, path=path)
    plan = _PLAN_DECODERS.get(action)
    if plan is None:
        raise InvalidPlanError(f"no {st} file is modelled for action {action!r}", path=path)
    if not data:
        return None
    return plan(data, path=path)
