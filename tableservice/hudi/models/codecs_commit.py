"""Commit metadata codecs: Jackson JSON in table version 6, Avro in versions 8 and 9.

Decoding detects the format from the bytes (Avro containers start with `Obj\\x01`), so a v8 reader can read a
v6 file and the other way round. Empty bytes are an empty metadata, as Hudi treats empty inflight files.

The JSON writer follows Hudi 0.14/0.15 (checked byte for byte against every v6 JSON file of the fixtures):
top-level keys `partitionToWriteStats, compacted, extraMetadata, operationType[, partitionToReplaceFileIds]`
(no `version`); write stats in the Java field order below, nulls written; delta-commit stats add
`logVersion, logOffset, baseFile, logFiles` (and keep `recordsStats`, a JSON-only key).
"""

from __future__ import annotations

import json
from typing import Any, Final, TypeVar

from pydantic import ValidationError

from tableservice.errors import InvalidPlanError
from tableservice.hudi.models.avro_io import is_avro_container, write_avro_container
from tableservice.hudi.models.codec_base import named_avro_record, single_avro_record, validate_model
from tableservice.hudi.models.commit import (
    HoodieCommitMetadata,
    HoodieReplaceCommitMetadata,
    HoodieRuntimeStats,
    HoodieWriteStat,
)
from tableservice.hudi.models.jackson_json import jackson_pretty
from tableservice.hudi.models.schemas import JSON_COMMIT_TABLE_VERSIONS, Kind, check_table_version, writer_schema

C = TypeVar("C", bound=HoodieCommitMetadata)

# Jackson's order of HoodieWriteStat's fields in Hudi 0.14/0.15 (Java declaration order).
_JSON_STAT_BASE: Final = (
    "fileId", "path", "cdcStats", "prevCommit", "numWrites", "numDeletes", "numUpdateWrites", "numInserts",
    "totalWriteBytes", "totalWriteErrors", "tempPath", "partitionPath", "totalLogRecords", "totalLogFilesCompacted",
    "totalLogSizeCompacted", "totalUpdatedRecordsCompacted", "totalLogBlocks", "totalCorruptLogBlock",
    "totalRollbackBlocks", "fileSizeInBytes", "minEventTime", "maxEventTime",
)  # fmt: skip
# HoodieDeltaWriteStat's own fields, after the base class's.
_JSON_STAT_DELTA: Final = ("logVersion", "logOffset", "baseFile", "logFiles")
# Avro fields that Hudi 0.14/0.15's Java class does not have: written to JSON only when set.
_JSON_STAT_AVRO_ONLY: Final = ("totalLogFiles", "totalLogReadTimeMs", "numUpdates")
_JSON_RUNTIME_ORDER: Final = ("totalScanTime", "totalUpsertTime", "totalCreateTime")


def _stat_to_json(stat: HoodieWriteStat) -> dict[str, Any]:
    avro = stat.to_avro()
    extras = stat.json_extras
    out: dict[str, Any] = {key: avro[key] for key in _JSON_STAT_BASE}
    if stat.prev_base_file is not None:  # newer Java classes declare it between maxEventTime and runtimeStats
        out["prevBaseFile"] = stat.prev_base_file
    runtime = stat.runtime_stats
    out["runtimeStats"] = None if runtime is None else _runtime_to_json(runtime)
    for key in _JSON_STAT_AVRO_ONLY:
        if avro[key] is not None:
            out[key] = avro[key]
    is_delta = any(avro[key] is not None for key in _JSON_STAT_DELTA) or "recordsStats" in extras
    if is_delta:
        for key in _JSON_STAT_DELTA:
            out[key] = avro[key]
    for key, value in extras.items():
        out[key] = value
    if out.get("logFiles") is not None:
        out["logFiles"] = list(out["logFiles"])
    return out


def _runtime_to_json(runtime: HoodieRuntimeStats) -> dict[str, Any]:
    avro = runtime.to_avro()
    return {key: avro[key] for key in _JSON_RUNTIME_ORDER}


def commit_metadata_to_json_dict(md: HoodieCommitMetadata) -> dict[str, Any]:
    """The dict Hudi 0.14/0.15's Jackson writes for `md`, keys in Hudi's order."""
    stats = md.partition_to_write_stats
    out: dict[str, Any] = {
        "partitionToWriteStats": None
        if stats is None
        else {part: [_stat_to_json(s) for s in items] for part, items in stats.items()},
        "compacted": md.compacted,
        "extraMetadata": md.extra_metadata,
        "operationType": md.operation_type,
    }
    if isinstance(md, HoodieReplaceCommitMetadata):
        replaced = md.partition_to_replace_file_ids
        out["partitionToReplaceFileIds"] = (
            None if replaced is None else {part: list(ids) for part, ids in replaced.items()}
        )
    for key, value in md.json_extras.items():
        out[key] = value
    return out


def _parse_json(data: bytes, *, path: str, what: str) -> dict[str, Any]:
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidPlanError(f"{what} is neither an Avro container nor JSON: {exc}", path=path) from exc
    except RecursionError:
        raise InvalidPlanError(f"{what} JSON is nested too deeply", path=path) from None
    if not isinstance(parsed, dict):
        raise InvalidPlanError(f"{what} JSON is a {type(parsed).__name__}, not an object", path=path)
    return parsed


def _validate_json(parsed: dict[str, Any], cls: type[C], *, path: str, what: str) -> C:
    try:
        return cls.model_validate(parsed)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise InvalidPlanError(
            f"{what} JSON does not match Hudi's fields: {where}: {first.get('msg')}", path=path
        ) from exc


_COMMIT_NAMES: Final = (Kind.COMMIT_METADATA.full_name, Kind.REPLACE_COMMIT_METADATA.full_name)


def decode_commit_metadata(data: bytes, *, path: str) -> HoodieCommitMetadata:
    """Commit metadata from a commit, deltacommit or replacecommit file (inflight or completed) of any table
    version. Replace commit metadata (Avro `HoodieReplaceCommitMetadata`, or JSON with
    `partitionToReplaceFileIds`) comes back as a HoodieReplaceCommitMetadata."""
    if not data:
        return HoodieCommitMetadata.empty()
    what = "commit metadata"
    if is_avro_container(data):
        name, record = named_avro_record(data, path=path, expected=_COMMIT_NAMES, what=what)
        replace = name == Kind.REPLACE_COMMIT_METADATA.full_name
        cls = HoodieReplaceCommitMetadata if replace else HoodieCommitMetadata
        return validate_model(cls, record, path=path, what=what)
    parsed = _parse_json(data, path=path, what=what)
    cls = HoodieReplaceCommitMetadata if "partitionToReplaceFileIds" in parsed else HoodieCommitMetadata
    return _validate_json(parsed, cls, path=path, what=what)


def decode_replace_commit_metadata(data: bytes, *, path: str) -> HoodieReplaceCommitMetadata:
    """Replace commit metadata of a replacecommit file; files holding plain commit metadata (inflight
    replace commits) decode too, with no replaced file ids."""
    if not data:
        return HoodieReplaceCommitMetadata.empty()
    what = "replace commit metadata"
    if is_avro_container(data):
        record = single_avro_record(data, path=path, expected=_COMMIT_NAMES, what=what)
        return validate_model(HoodieReplaceCommitMetadata, record, path=path, what=what)
    return _validate_json(_parse_json(data, path=path, what=what), HoodieReplaceCommitMetadata, path=path, what=what)


def encode_commit_metadata(md: HoodieCommitMetadata, *, table_version: int) -> bytes:
    """Bytes of a commit/deltacommit file (inflight or completed): JSON for v6, Avro for v8/v9. A
    HoodieReplaceCommitMetadata is written as replace commit metadata."""
    check_table_version(table_version)
    if table_version in JSON_COMMIT_TABLE_VERSIONS:
        return jackson_pretty(commit_metadata_to_json_dict(md)).encode("utf-8")
    kind = Kind.REPLACE_COMMIT_METADATA if isinstance(md, HoodieReplaceCommitMetadata) else Kind.COMMIT_METADATA
    return write_avro_container([md.to_avro()], writer_schema(kind, table_version))


def encode_replace_commit_metadata(md: HoodieReplaceCommitMetadata, *, table_version: int) -> bytes:
    """Bytes of a completed replacecommit file: JSON for v6, Avro `HoodieReplaceCommitMetadata` for v8/v9."""
    if not isinstance(md, HoodieReplaceCommitMetadata):
        md = HoodieReplaceCommitMetadata.model_validate(md.to_avro())
    return encode_commit_metadata(md, table_version=table_version)
