"""Table versions 8 and 9: the LSM timeline history under `.hoodie/timeline/history/`.

Layout (see `tableservice.hudi.timeline.archive` for the facts and their Java sources):
- data files `<minInstant>_<maxInstant>_<level>.parquet`, rows `HoodieLSMTimelineInstant`;
- `manifest_<N>`: Jackson pretty JSON `{"files" : [ {"fileName" : ..., "fileLen" : ...}, ... ]}`, the valid
  data files of snapshot N;
- `_version_`: the latest snapshot number as text.

Writes follow Hudi's order (data file, then `manifest_<N+1>`, then `_version_`), so a crash leaves the previous
snapshot readable: a data file no manifest lists is invisible, a manifest `_version_` does not name is ignored
while `_version_` exists, and without `_version_` readers take the highest manifest.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq

from tableservice.errors import CorruptFileError, FileMissingError, InvalidPlanError, TableServiceError
from tableservice.hudi.file_group.log_format.reader import check_decoded_table
from tableservice.hudi.models import Kind, schema_to_json, writer_schema
from tableservice.hudi.models.jackson_json import jackson_pretty
from tableservice.hudi.table.config import TableConfig
from tableservice.hudi.timeline.archive_model import ArchivedInstant, ArchiveSource, in_range, parse_action
from tableservice.hudi.timeline.instant import Action, Instant, State
from tableservice.storage import Storage, join

VERSION_FILE: Final = "_version_"
MANIFEST_PREFIX: Final = "manifest_"
DEFAULT_COMPACTION_BATCH: Final = 10
"""`hoodie.timeline.compaction.batch.size`."""
DEFAULT_TARGET_FILE_MAX_BYTES: Final = 1024 * 1024 * 1024
"""Total input size above which a compaction group closes (Hudi: "restricted by the gross file size by 1GB")."""
SNAPSHOTS_TO_KEEP: Final = 3
LSM_INSTANT_VERSION: Final = 1
PARQUET_COMPRESSION: Final = "gzip"

_FILE_RE: Final = re.compile(r"^(\d+)_(\d+)_(\d)\.parquet$")
_COLUMNS: Final = ("instantTime", "completionTime", "action", "metadata", "plan", "version")


def _arrow_schema() -> pa.Schema:
    avro = schema_to_json(writer_schema(Kind.LSM_TIMELINE_INSTANT, 9))
    return pa.schema(
        [
            pa.field("instantTime", pa.string()),
            pa.field("completionTime", pa.string()),
            pa.field("action", pa.string()),
            pa.field("metadata", pa.binary()),
            pa.field("plan", pa.binary()),
            pa.field("version", pa.int32(), nullable=False),
        ],
        metadata={"parquet.avro.schema": avro, "writer.model.name": "avro"},
    )


ARROW_SCHEMA: Final = _arrow_schema()
"""Arrow schema of a history file; its metadata carries the Avro schema parquet-avro readers use."""


# --- names -----------------------------------------------------------------------------------------


def lsm_file_name(min_instant: str, max_instant: str, level: int) -> str:
    return f"{min_instant}_{max_instant}_{level}.parquet"


def parse_lsm_file_name(name: str) -> tuple[str, str, int] | None:
    """(min instant, max instant, level) of a history data file name, or None."""
    m = _FILE_RE.match(name)
    return None if m is None else (m.group(1), m.group(2), int(m.group(3)))


def _overlaps(name: str, start: str | None, end: str | None) -> bool:
    parsed = parse_lsm_file_name(name)
    if parsed is None:
        return True
    lo, hi, _ = parsed
    return (end is None or lo <= end) and (start is None or hi >= start)


# --- manifest and version --------------------------------------------------------------------------


@dataclass(frozen=True)
class LsmFileEntry:
    file_name: str
    file_len: int


@dataclass(frozen=True)
class LsmManifest:
    """The valid data files of one snapshot version (`HoodieLSMTimelineManifest`)."""

    files: tuple[LsmFileEntry, ...] = ()

    @property
    def file_names(self) -> list[str]:
        return [f.file_name for f in self.files]

    def to_json(self) -> str:
        """Jackson's default pretty printer output, as Hudi writes manifests."""
        return jackson_pretty({"files": [{"fileName": f.file_name, "fileLen": f.file_len} for f in self.files]})


def parse_manifest(data: bytes, *, path: str) -> LsmManifest:
    """A manifest file; empty content is an empty manifest (as in Hudi). Unknown keys are ignored."""
    if not data.strip():
        return LsmManifest()
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptFileError(f"LSM manifest is not JSON: {e}", path=path) from e
    except RecursionError:
        raise CorruptFileError("LSM manifest JSON is nested too deeply", path=path) from None
    files = doc.get("files") if isinstance(doc, dict) else None
    if files is None and isinstance(doc, dict):
        return LsmManifest()
    if not isinstance(files, list):
        raise CorruptFileError(f"LSM manifest has no list of files (got {str(doc)[:80]!r})", path=path)
    out = []
    for item in files:
        name = item.get("fileName") if isinstance(item, dict) else None
        length = item.get("fileLen", 0) if isinstance(item, dict) else None
        if not isinstance(name, str) or not isinstance(length, int) or isinstance(length, bool):
            raise CorruptFileError(f"LSM manifest entry is not {{fileName, fileLen}}: {item!r:.120}", path=path)
        out.append(LsmFileEntry(name, length))
    return LsmManifest(tuple(out))


def manifest_versions(storage: Storage, folder: str) -> list[int]:
    """Versions of the `manifest_<N>` files in the history folder (temp files excluded), ascending."""
    out = []
    for fi in storage.list(folder):
        name = fi.name
        if fi.is_dir or not name.startswith(MANIFEST_PREFIX) or name.endswith(".tmp"):
            continue
        try:
            out.append(int(name.split("_")[1]))
        except (IndexError, ValueError):
            continue
    return sorted(out)


def latest_snapshot_version(storage: Storage, folder: str) -> int:
    """The version `_version_` names; without a readable `_version_`, the highest manifest; -1 when none."""
    try:
        text = storage.read_bytes(join(folder, VERSION_FILE)).decode("utf-8").strip()
        return int(text)
    except (FileMissingError, UnicodeDecodeError, ValueError):
        versions = manifest_versions(storage, folder)
        return versions[-1] if versions else -1


def read_manifest(storage: Storage, folder: str, version: int) -> LsmManifest:
    if version < 0:
        return LsmManifest()
    path = join(folder, f"{MANIFEST_PREFIX}{version}")
    try:
        data = storage.read_bytes(path)
    except FileMissingError as e:
        raise CorruptFileError(
            f"{VERSION_FILE} names snapshot {version} but {MANIFEST_PREFIX}{version} does not exist",
            path=join(folder, VERSION_FILE),
        ) from e
    return parse_manifest(data, path=path)


def latest_manifest(storage: Storage, folder: str) -> tuple[int, LsmManifest]:
    version = latest_snapshot_version(storage, folder)
    return version, read_manifest(storage, folder, version)


# --- reading ---------------------------------------------------------------------------------------


def _read_columns(storage: Storage, location: str, columns: Sequence[str]) -> pa.Table:
    try:
        f = storage.open_input_file(location)
    except FileMissingError as e:
        raise FileMissingError("history data file listed in the LSM manifest does not exist", path=location) from e
    try:
        pf = pq.ParquetFile(f)
        names = set(pf.schema_arrow.names)
        missing = [c for c in columns if c not in names]
        if missing:
            raise CorruptFileError(f"history data file lacks columns {missing}", path=location)
        table = pf.read(columns=list(columns), use_threads=False)
        for c in columns:
            expected = ARROW_SCHEMA.field(c).type
            if not table.schema.field(c).type.equals(expected):
                raise CorruptFileError(
                    f"history data file column {c} is {table.schema.field(c).type}, not {expected}", path=location
                )
        check_decoded_table(table)
        return table
    except TableServiceError:
        raise
    except (pa.ArrowException, OSError, ValueError) as e:
        raise CorruptFileError(f"history data file is not readable Parquet: {e}", path=location) from e
    finally:
        f.close()


def read_lsm_file(
    storage: Storage, location: str, *, start: str | None = None, end: str | None = None
) -> list[ArchivedInstant]:
    """The rows of one history data file whose instant time is within [start, end]."""
    table = _read_columns(storage, location, _COLUMNS[:5])
    times, dones, actions, metas, plans = (table.column(c).to_pylist() for c in _COLUMNS[:5])
    out = []
    for t, done, action, meta, plan in zip(times, dones, actions, metas, plans, strict=True):
        if not isinstance(t, str):
            raise CorruptFileError(f"history row has no instantTime (got {t!r})", path=location)
        if not in_range(t, start, end):
            continue
        act = parse_action(action, path=location)
        try:
            Instant(t, act, State.COMPLETED, done)
        except TableServiceError as e:
            raise CorruptFileError(f"history row: {e.problem}", path=location) from e
        out.append(ArchivedInstant(t, act, State.COMPLETED, done, location, done, meta, plan))
    return out


def read_lsm_keys(storage: Storage, location: str) -> list[ArchivedInstant]:
    """The instants of one history data file without their metadata and plan bytes (three columns read)."""
    table = _read_columns(storage, location, _COLUMNS[:3])
    times, dones, actions = (table.column(c).to_pylist() for c in _COLUMNS[:3])
    out = []
    for t, done, action in zip(times, dones, actions, strict=True):
        if not isinstance(t, str):
            raise CorruptFileError(f"history row has no instantTime (got {t!r})", path=location)
        act = parse_action(action, path=location)
        try:
            Instant(t, act, State.COMPLETED, done)
        except TableServiceError as e:
            raise CorruptFileError(f"history row: {e.problem}", path=location) from e
        out.append(ArchivedInstant(t, act, State.COMPLETED, done, location, done))
    return out


def load_lsm_instants(
    storage: Storage, folder: str, *, start: str | None = None, end: str | None = None
) -> list[ArchivedInstant]:
    """Every row of the files the latest manifest lists (files skipped by their name's time range), sorted."""
    _, manifest = latest_manifest(storage, folder)
    seen: dict[tuple[str, Action], ArchivedInstant] = {}
    for name in sorted(manifest.file_names):
        if _overlaps(name, start, end):
            for inst in read_lsm_file(storage, join(folder, name), start=start, end=end):
                seen.setdefault((inst.requested_time, inst.action), inst)
    return sorted(seen.values(), key=lambda i: i.sort_key)


def lsm_completion_times(
    storage: Storage, folder: str, *, start: str | None = None, end: str | None = None
) -> dict[str, str]:
    """instant time -> completion time of every archived instant (only those two columns are read)."""
    _, manifest = latest_manifest(storage, folder)
    out: dict[str, str] = {}
    for name in sorted(manifest.file_names):
        if not _overlaps(name, start, end):
            continue
        table = _read_columns(storage, join(folder, name), ("instantTime", "completionTime"))
        for t, done in zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True):
            if isinstance(t, str) and in_range(t, start, end):
                out.setdefault(t, done if isinstance(done, str) else t)
    return out


# --- writing ---------------------------------------------------------------------------------------


def lsm_row(source: ArchiveSource) -> dict[str, Any]:
    """The `HoodieLSMTimelineInstant` Hudi writes for one completed instant (MetadataConversionUtils)."""
    inst = source.instant
    if not inst.is_completed or inst.completion_time is None:
        raise InvalidPlanError(f"only completed instants with a completion time can be archived, not {inst}")
    plan: bytes | None = None
    pending = inst.action if (source.requested is not None or source.inflight is not None) else None
    if pending is Action.CLEAN:
        plan = source.requested if source.requested is not None else source.inflight
    elif pending in (Action.COMPACTION, Action.LOG_COMPACTION):
        plan = source.requested
    elif pending in (Action.REPLACE_COMMIT, Action.CLUSTERING):
        plan = source.requested or None
        if source.inflight:
            plan = source.inflight
    return {
        "instantTime": inst.requested_time,
        "completionTime": inst.completion_time,
        "action": inst.completed_action(2).value,
        "metadata": source.completed or None,
        "plan": plan,
        "version": LSM_INSTANT_VERSION,
    }


def encode_lsm_file(rows: Sequence[dict[str, Any]]) -> bytes:
    """A history data file: one row group, gzip, Avro schema in the footer (as parquet-avro writes it)."""
    return _parquet_bytes(pa.Table.from_pylist(list(rows), schema=ARROW_SCHEMA))


def _parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    # No `ARROW:schema` footer entry; the Avro schema goes in as a plain key-value pair, as parquet-avro writes it.
    with pq.ParquetWriter(buf, ARROW_SCHEMA, compression=PARQUET_COMPRESSION, store_schema=False) as writer:
        writer.add_key_value_metadata(dict(ARROW_SCHEMA.metadata or {}))
        writer.write_table(table.cast(ARROW_SCHEMA))
    return buf.getvalue()


def _write_data_file(storage: Storage, folder: str, name: str, data: bytes) -> None:
    storage.write_bytes(join(folder, name), data)


def update_manifest(storage: Storage, folder: str, *, remove: Iterable[str] = (), add: str | None = None) -> int:
    """Write the next snapshot: `manifest_<N+1>` = latest manifest - `remove` + `add`, then `_version_`."""
    version, manifest = latest_manifest(storage, folder)
    dropped = set(remove)
    files = [f for f in manifest.files if f.file_name not in dropped]
    if add is not None:
        info = storage.info(join(folder, add))
        if info is None:
            raise FileMissingError("history data file to add to the manifest does not exist", path=join(folder, add))
        files.append(LsmFileEntry(add, info.size))
    new_version = 1 if version < 0 else version + 1
    _create_manifest(storage, folder, new_version, LsmManifest(tuple(files)))
    _write_version(storage, folder, new_version)
    return new_version


def _create_manifest(storage: Storage, folder: str, version: int, manifest: LsmManifest) -> None:
    path = join(folder, f"{MANIFEST_PREFIX}{version}")
    storage.delete(path)  # a manifest left by a write that failed before updating `_version_`
    storage.create_if_absent(path, manifest.to_json().encode("utf-8"))


def _write_version(storage: Storage, folder: str, version: int) -> None:
    path = join(folder, VERSION_FILE)
    storage.delete(path)  # readers without `_version_` take the highest manifest, which is the new one
    storage.create_if_absent(path, str(version).encode("utf-8"))


def archive_instants_lsm(
    storage: Storage, base_path: str, config: TableConfig, sources: Iterable[ArchiveSource]
) -> str | None:
    """Archive completed instants as a new level-0 history file and a new snapshot; returns the file name, or None
    when there is nothing to write or the same file is already committed (a retried archival).

    Call `compact_lsm` after the archived instants have left the active timeline (Hudi's order).
    """
    if config.version < 8:
        raise InvalidPlanError(f"the LSM history is for table version 8+, not {config.version}", table=config.name)
    ordered = sorted(sources, key=lambda s: s.instant.requested_time)
    if not ordered:
        return None
    rows = [lsm_row(s) for s in ordered]
    folder = join(base_path, config.history_folder)
    name = lsm_file_name(rows[0]["instantTime"], rows[-1]["instantTime"], 0)
    if storage.exists(join(folder, name)):
        if name in latest_manifest(storage, folder)[1].file_names:
            return None
        storage.delete(join(folder, name))  # left by a write that failed before its manifest
    _write_data_file(storage, folder, name, encode_lsm_file(rows))
    update_manifest(storage, folder, add=name)
    return name


# --- compaction and cleaning -----------------------------------------------------------------------


def _candidates(entries: list[LsmFileEntry], batch_size: int, max_bytes: int) -> list[str]:
    """At most `batch_size` consecutive files, oldest first, closing the group once their size passes
    `max_bytes` (a single oversized file is skipped)."""
    out: list[str] = []
    total = 0
    for entry in sorted(entries, key=lambda e: e.file_name):
        total += entry.file_len
        out.append(entry.file_name)
        if len(out) >= batch_size:
            break
        if total > max_bytes:
            if len(out) < 2:
                out, total = [], 0
            else:
                break
    return out


def compact_lsm(
    storage: Storage,
    base_path: str,
    config: TableConfig,
    *,
    batch_size: int = DEFAULT_COMPACTION_BATCH,
    target_file_max_bytes: int = DEFAULT_TARGET_FILE_MAX_BYTES,
) -> list[str]:
    """Hudi's compactAndClean: while a level holds at least `batch_size` files, merge its oldest ones into one file
    on the next level (new snapshot each time); then clean. Returns the compacted files written."""
    folder = join(base_path, config.history_folder)
    written: list[str] = []
    level = 0
    while True:
        _, manifest = latest_manifest(storage, folder)
        on_level = [f for f in manifest.files if (parse_lsm_file_name(f.file_name) or ("", "", 0))[2] == level]
        if len(on_level) < batch_size:
            break
        chosen = _candidates(on_level, batch_size, target_file_max_bytes)
        if len(chosen) < 2:
            break
        parsed = [p for p in (parse_lsm_file_name(n) for n in chosen) if p is not None]
        if len(parsed) != len(chosen):
            raise CorruptFileError(f"LSM manifest lists files that are not history files: {chosen}", path=folder)
        name = lsm_file_name(min(p[0] for p in parsed), max(p[1] for p in parsed), parsed[0][2] + 1)
        tables = [_read_columns(storage, join(folder, n), _COLUMNS).cast(ARROW_SCHEMA) for n in chosen]
        storage.delete(join(folder, name))
        _write_data_file(storage, folder, name, _parquet_bytes(pa.concat_tables(tables)))
        update_manifest(storage, folder, remove=chosen, add=name)
        written.append(name)
        level += 1
    clean_lsm(storage, folder, compacted_levels=len(written))
    return written


def clean_lsm(storage: Storage, folder: str, *, compacted_levels: int = 0) -> list[str]:
    """Keep the newest `3 + compacted_levels` snapshots: delete older manifests, then every data file none of the
    kept manifests lists. Returns the deleted file names."""
    versions = manifest_versions(storage, folder)
    keep_n = SNAPSHOTS_TO_KEEP + compacted_levels
    if len(versions) <= keep_n:
        return []
    keep = sorted(versions, reverse=True)[:keep_n]
    referenced: set[str] = set()
    for v in keep:
        referenced.update(read_manifest(storage, folder, v).file_names)
    deleted = []
    stale = set(versions) - set(keep)
    for fi in storage.list(folder):
        if fi.is_dir or not fi.name.startswith(MANIFEST_PREFIX) or fi.name.endswith(".tmp"):
            continue
        number = fi.name[len(MANIFEST_PREFIX) :]
        if number.isdigit() and int(number) in stale:
            storage.delete(fi.location)
            deleted.append(fi.name)
    for fi in storage.list(folder):
        if not fi.is_dir and fi.name.endswith(".parquet") and fi.name not in referenced:
            storage.delete(fi.location)
            deleted.append(fi.name)
    return deleted
