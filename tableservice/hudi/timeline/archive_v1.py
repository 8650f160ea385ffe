"""Table version 6: the archive log `.hoodie/archived/.commits_.archive.<version>_<writeToken>`.

A Hudi log file (file id `commits`, extension `.archive`, empty base instant) whose Avro data blocks carry
`HoodieArchivedMetaEntry` records, one per archived timeline file. See `archive` (this folder) for the facts.
Blocks are read with the log reader (`iter_log_blocks`); records are decoded here with fastavro into plain
dicts (our log reader's `decode_data_block` gives Arrow tables, which lose the union structure the entry models
need) and written with fastavro, framed by the log format's block writer.
"""

from __future__ import annotations

import io
import json
import logging
import re
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import fastavro

from tableservice.errors import (
    AlreadyExistsError,
    CorruptFileError,
    FileMissingError,
    InvalidPlanError,
    TableServiceError,
)
from tableservice.hudi.file_group.log_format import (
    BlockType,
    CorruptBlock,
    HeaderKey,
    iter_log_blocks,
    read_block_content,
)
from tableservice.hudi.file_group.log_format.blocks import BLOCK_CONTENT_VERSION, frame_block
from tableservice.hudi.models import (
    HoodieArchivedMetaEntry,
    Kind,
    build_archived_meta_entry,
    schema_to_json,
    writer_schema,
)
from tableservice.hudi.models.avro_io import parsed_schema, read_avro_container
from tableservice.hudi.table.config import TableConfig
from tableservice.hudi.table.schema_guard import zero_width_array
from tableservice.hudi.timeline.archive_model import ArchivedInstant, ArchiveSource, in_range, parse_action, parse_state
from tableservice.hudi.timeline.instant import Action, Instant, State
from tableservice.storage import FileInfo, Storage, join

log = logging.getLogger(__name__)

ARCHIVE_FILE_PREFIX: Final = ".commits_.archive."
MERGE_ARCHIVE_PLAN: Final = "mergeArchivePlan"
UNKNOWN_WRITE_TOKEN: Final = "1-0-1"
DEFAULT_ARCHIVAL_BATCH: Final = 10
"""`hoodie.commits.archival.batch`: entries per Avro data block."""
DEFAULT_MAX_LOG_FILE_SIZE: Final = 512 * 1024 * 1024
"""The log writer's default size threshold before it rolls over to the next version."""

_FILE_RE: Final = re.compile(r"^\.commits_\.archive\.(\d+)(?:_(.*))?$")
_I32: Final = struct.Struct(">i")


def archive_file_name(version: int, write_token: str = UNKNOWN_WRITE_TOKEN) -> str:
    return f"{ARCHIVE_FILE_PREFIX}{version}_{write_token}"


def archive_log_files(storage: Storage, folder: str) -> list[tuple[int, FileInfo]]:
    """The archive log files of a folder with their versions, newest version first (Hudi's reading order)."""
    out = []
    for fi in storage.list(folder):
        if fi.is_dir:
            continue
        m = _FILE_RE.match(fi.name)
        if m is not None:
            out.append((int(m.group(1)), fi))
    out.sort(key=lambda item: (-item[0], item[1].name))
    return out


# --- reading ---------------------------------------------------------------------------------------


def read_archive_log(
    storage: Storage, location: str, *, start: str | None = None, end: str | None = None, table: str | None = None
) -> Iterator[ArchivedInstant]:
    """The entries of one archive log file whose commit time is within [start, end], in file order.

    Corrupt blocks (bad framing) are skipped, as Hudi's log reader does; a well-framed block whose records do not
    decode raises CorruptFileError naming the file, the block offset and the record.
    """
    for block in iter_log_blocks(storage, location, table=table):
        if isinstance(block, CorruptBlock):
            log.warning("skipping corrupt block at offset %d of %s: %s", block.offset, location, block.reason)
            continue
        if block.block_type != BlockType.AVRO_DATA:
            continue
        for record in _decode_block_records(block.schema, read_block_content(block, storage), block.offset, location):
            inst = _entry_to_instant(record, location)
            if in_range(inst.requested_time, start, end):
                yield inst


def _decode_block_records(schema_text: str | None, content: bytes, offset: int, location: str) -> list[dict[str, Any]]:
    where = f"Avro data block at offset {offset}"
    if schema_text is None:
        raise CorruptFileError(f"{where} has no SCHEMA header", path=location)
    try:
        schema = json.loads(schema_text)
        parsed = parsed_schema(schema)
    except Exception as e:  # json and fastavro raise many kinds on a damaged schema
        raise CorruptFileError(f"{where}: SCHEMA header is not an Avro schema: {e}", path=location) from e
    unbounded = zero_width_array(schema)
    if unbounded is not None:
        raise CorruptFileError(f"{where}: SCHEMA header has an {unbounded}", path=location)
    if len(content) < 8:
        raise CorruptFileError(
            f"{where}: content of {len(content)} bytes has no version and record count", path=location
        )
    version, count = struct.unpack_from(">ii", content, 0)
    if version not in (2, BLOCK_CONTENT_VERSION):
        raise CorruptFileError(f"{where}: unsupported Avro block content version {version}", path=location)
    if count < 0 or count > (len(content) - 8) // 4:
        raise CorruptFileError(f"{where}: record count {count} does not fit the content", path=location)
    out: list[dict[str, Any]] = []
    pos = 8
    for i in range(count):
        if pos + 4 > len(content):
            raise CorruptFileError(f"{where}: record {i} runs past the content", path=location)
        (length,) = _I32.unpack_from(content, pos)
        pos += 4
        if length < 0 or pos + length > len(content):
            raise CorruptFileError(f"{where}: record {i} has invalid length {length}", path=location)
        try:
            record = fastavro.schemaless_reader(io.BytesIO(content[pos : pos + length]), parsed, None)
        except Exception as e:  # fastavro raises many kinds on damaged bytes
            raise CorruptFileError(
                f"{where}: record {i} does not decode: {type(e).__name__}: {e}", path=location
            ) from e
        if not isinstance(record, dict):
            raise CorruptFileError(f"{where}: record {i} is not an Avro record", path=location)
        out.append(record)
        pos += length
    return out


def _entry_to_instant(record: dict[str, Any], location: str) -> ArchivedInstant:
    commit_time = record.get("commitTime")
    if not isinstance(commit_time, str):
        raise CorruptFileError(f"archive entry has no commitTime (got {commit_time!r})", path=location)
    action = parse_action(record.get("actionType"), path=location)
    state = parse_state(record.get("actionState"), path=location)
    transition = record.get("stateTransitionTime")
    transition = transition if isinstance(transition, str) and transition else None
    try:
        Instant(commit_time, action, state)
    except TableServiceError as e:
        raise CorruptFileError(f"archive entry: {e.problem}", path=location) from e
    return ArchivedInstant(
        requested_time=commit_time,
        action=action,
        state=state,
        completion_time=transition if state is State.COMPLETED else None,
        location=location,
        state_transition_time=transition,
        entry=record,
    )


def load_archive_log_instants(
    storage: Storage, folder: str, *, start: str | None = None, end: str | None = None, table: str | None = None
) -> list[ArchivedInstant]:
    """Every entry of every archive log file in `folder`, sorted by instant; an entry archived twice (a retried
    archival) is kept once, from the newest file."""
    seen: dict[tuple[str, Action, State], ArchivedInstant] = {}
    for _, fi in archive_log_files(storage, folder):
        try:
            found = list(read_archive_log(storage, fi.location, start=start, end=end, table=table))
        except CorruptFileError:
            if fi.name == _merging_into(storage, folder):
                log.warning("skipping %s: a merge of small archive files did not finish", fi.location)
                continue
            raise
        for inst in found:
            seen.setdefault((inst.requested_time, inst.action, inst.state), inst)
    return sorted(seen.values(), key=lambda i: i.sort_key)


def _merging_into(storage: Storage, folder: str) -> str | None:
    """The file an unfinished merge of small archive files (`hoodie.archive.merge.enable`) was writing, from its
    `mergeArchivePlan` (Avro `HoodieMergeArchiveFilePlan`); Hudi's reader ignores read errors in that file."""
    path = join(folder, MERGE_ARCHIVE_PLAN)
    try:
        records = read_avro_container(storage.read_bytes(path), path=path)
    except (FileMissingError, InvalidPlanError):
        return None
    name = records[0].get("mergedArchiveFileName") if records else None
    return name if isinstance(name, str) and name else None


# --- writing ---------------------------------------------------------------------------------------


def _file_action(instant: Instant, state: State) -> Action:
    """The action in the name of the instant's timeline file of `state` in layout 1."""
    if state is State.COMPLETED:
        return instant.completed_action(1)
    return instant.action


def archive_entries(
    sources: Iterable[ArchiveSource], *, base_path: str, config: TableConfig
) -> list[HoodieArchivedMetaEntry]:
    """The `HoodieArchivedMetaEntry` records Hudi 0.14/0.15 write for these instants: one per existing timeline file,
    requested, inflight, completed, in instant order. Compaction entries of every state carry the plan (Hudi reads
    it by instant time); an empty file gives an entry without metadata."""
    out = []
    for source in sorted(sources, key=lambda s: s.instant.sort_key):
        for state in (State.REQUESTED, State.INFLIGHT, State.COMPLETED):
            data = source.content(state)
            if data is None:
                continue
            action = _file_action(source.instant, state)
            if action in (Action.COMPACTION, Action.LOG_COMPACTION):
                data = source.requested if source.requested is not None else data
            path = join(base_path, config.timeline_folder, source.instant.with_state(state).file_name(1))
            transition = source.transition_times.get(state)
            t = source.instant.requested_time
            try:
                entry = build_archived_meta_entry(
                    data, action=action.value, state=state, instant_time=t, path=path, state_transition_time=transition
                )
            except InvalidPlanError:
                if data:
                    raise
                # An empty file (a crash, or a state Hudi leaves empty): an entry without metadata, as Hudi writes.
                entry = _empty_entry(t, action, state, transition)
            # Hudi builds the entry with the no-argument constructor and never sets `version`: it stays null.
            out.append(entry.model_copy(update={"version": None}))
    return out


def _empty_entry(instant_time: str, action: Action, state: State, transition: str | None) -> HoodieArchivedMetaEntry:
    return HoodieArchivedMetaEntry(
        commit_time=instant_time,
        action_type=action.value,
        action_state=state.name,
        state_transition_time=transition,
        version=None,
    )


def encode_archive_blocks(
    entries: Sequence[HoodieArchivedMetaEntry], *, batch_size: int = DEFAULT_ARCHIVAL_BATCH
) -> list[bytes]:
    """Avro data blocks of `batch_size` entries each; the header holds only the SCHEMA."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    schema = writer_schema(Kind.ARCHIVED_META_ENTRY, 6)
    parsed = parsed_schema(schema)
    header = {HeaderKey.SCHEMA: schema_to_json(schema)}
    blocks = []
    for i in range(0, len(entries), batch_size):
        batch = entries[i : i + batch_size]
        parts = [struct.pack(">ii", BLOCK_CONTENT_VERSION, len(batch))]
        for entry in batch:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, parsed, entry.to_avro())
            datum = buf.getvalue()
            parts.append(_I32.pack(len(datum)))
            parts.append(datum)
        blocks.append(frame_block(BlockType.AVRO_DATA, header, b"".join(parts)))
    return blocks


def archive_instants_v6(
    storage: Storage,
    base_path: str,
    config: TableConfig,
    sources: Iterable[ArchiveSource],
    *,
    batch_size: int = DEFAULT_ARCHIVAL_BATCH,
    write_token: str = UNKNOWN_WRITE_TOKEN,
    max_file_size: int = DEFAULT_MAX_LOG_FILE_SIZE,
) -> list[str]:
    """Archive completed instants into new archive log files; returns their locations.

    Each call writes whole new files at the next versions (`.commits_.archive.<n+1>_<token>`), each created
    atomically, as Hudi does on storage without append (local disk, object stores): a crash leaves either no file or
    a complete one. Moving the instants off the active timeline is the caller's job, after this returns.
    """
    if config.version != 6:
        raise InvalidPlanError(f"the archive log is for table version 6, not {config.version}", table=config.name)
    blocks = encode_archive_blocks(archive_entries(sources, base_path=base_path, config=config), batch_size=batch_size)
    if not blocks:
        return []
    files: list[list[bytes]] = [[]]
    size = 0
    for block in blocks:
        if files[-1] and size + len(block) > max_file_size:
            files.append([])
            size = 0
        files[-1].append(block)
        size += len(block)
    folder = join(base_path, config.history_folder)
    written = []
    for content in files:
        written.append(_create_next(storage, folder, b"".join(content), write_token, config.name))
    return written


def _create_next(storage: Storage, folder: str, data: bytes, write_token: str, table: str) -> str:
    existing = archive_log_files(storage, folder)
    version = existing[0][0] + 1 if existing else 1
    for _ in range(100):
        location = join(folder, archive_file_name(version, write_token))
        try:
            storage.create_if_absent(location, data)
            return location
        except AlreadyExistsError:
            version += 1
    raise AlreadyExistsError(f"could not find a free archive log version up to {version}", table=table, path=folder)
