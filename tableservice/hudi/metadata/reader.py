"""Reading the metadata table of a data table: its partitions' records, merged by key, as Hudi readers see them.

The metadata table is an ordinary merge-on-read table under `.hoodie/metadata` with HFile base files; its
file slices come from our file-system view over its own timeline. Per slice: the base HFile's cells, then the
log files' HFile data blocks and delete blocks in log order, keeping only blocks whose instant is valid
(`valid_instants`) and not rolled back by a command block (table version 6). Records of one key are merged
oldest first by the partition's rule (`records.merge`).
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import fastavro

from tableservice.errors import CorruptFileError, InvalidTableConfigError, TableServiceError
from tableservice.hudi.file_group.log_format import BlockType, HeaderKey, LogBlock, read_block_content
from tableservice.hudi.file_group.log_format.deletes import decode_delete_content
from tableservice.hudi.file_group.reader import scan_log_blocks
from tableservice.hudi.metadata.column_stats import read_index_definitions
from tableservice.hudi.metadata.hfile import read_hfile
from tableservice.hudi.metadata.keys import ALL_PARTITIONS_KEY, NON_PARTITIONED, MetadataPartition
from tableservice.hudi.metadata.records import RawRecord, is_live, live_files, merge_for
from tableservice.hudi.metadata.valid_instants import valid_instant_times
from tableservice.hudi.models import decode_restore_metadata
from tableservice.hudi.table.fs_view import FileSlice, FileSystemView
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.schema_guard import zero_width_array
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant
from tableservice.storage import FileInfo, join

METADATA_FOLDER = ".hoodie/metadata"


def metadata_table_path(base_path: str) -> str:
    return join(base_path, METADATA_FOLDER)


@dataclass(frozen=True)
class _ValidBlocks:
    """Block visibility for the metadata table's log scan (the shape `scan_log_blocks` asks for)."""

    valid: frozenset[str]

    def visible(self, instant: str | None) -> bool:
        return instant is not None and instant in self.valid


class MetadataTable:
    """The metadata table of `data` as of the data timeline `data_timeline` (one snapshot)."""

    def __init__(self, data: HudiTable, data_timeline: Timeline, mdt: HudiTable, mdt_timeline: Timeline) -> None:
        self.data = data
        self.data_timeline = data_timeline
        self.mdt = mdt
        self.mdt_timeline = mdt_timeline
        self._valid: frozenset[str] | None = None
        self._views: dict[str, FileSystemView] = {}
        self._index_defs: dict[str, dict[str, Any]] | None = None
        self._index_defs_read = False

    @classmethod
    def open(cls, data: HudiTable, data_timeline: Timeline) -> MetadataTable | None:
        """The metadata table when `hoodie.properties` lists readable partitions; None otherwise."""
        if not data.config.metadata_partitions:
            return None
        path = metadata_table_path(data.base_path)
        if not data.storage.exists(join(path, ".hoodie", "hoodie.properties")):
            raise InvalidTableConfigError(
                f"hoodie.table.metadata.partitions lists {','.join(data.config.metadata_partitions)} but the "
                "metadata table is missing",
                table=data.name,
                path=path,
            )
        try:
            mdt = HudiTable.open(data.storage, path)
        except TableServiceError as e:
            raise e.with_context(table=data.name) from e
        if mdt.config.base_file_format != "HFILE":
            raise InvalidTableConfigError(
                f"metadata table base file format is {mdt.config.base_file_format}, not HFILE",
                table=data.name,
                path=join(path, ".hoodie/hoodie.properties"),
            )
        return cls(data, data_timeline, mdt, mdt.timeline())

    @property
    def partitions(self) -> tuple[str, ...]:
        """The metadata partitions readers may use (`hoodie.table.metadata.partitions`)."""
        return self.data.config.metadata_partitions

    @property
    def written_partitions(self) -> tuple[str, ...]:
        """The partitions every commit must update: the readable ones and those an indexing action is building."""
        inflight = [p for p in self.data.config.metadata_partitions_inflight if p not in self.partitions]
        return (*self.partitions, *inflight)

    def index_definitions(self) -> dict[str, dict[str, Any]] | None:
        """`.hoodie/.index_defs/index.json` (table version 8+): index name -> definition; None when absent."""
        if not self._index_defs_read:
            try:
                self._index_defs = read_index_definitions(self.data.storage, self.data.base_path)
            except TableServiceError as e:
                raise e.with_context(table=self.data.name) from e
            self._index_defs_read = True
        return self._index_defs

    def index_version(self, partition: str) -> str | None:
        version = (self.index_definitions() or {}).get(partition, {}).get("version")
        return version if isinstance(version, str) else None

    def valid_instants(self) -> frozenset[str]:
        if self._valid is None:
            self._valid = valid_instant_times(self.data_timeline, self.mdt_timeline, self._rolled_back_by)
        return self._valid

    def _rolled_back_by(self, instant: Instant) -> Iterable[str]:
        if instant.action is Action.RESTORE:
            path = self.data.active.path_of(instant)
            try:
                return decode_restore_metadata(self.data.storage.read_bytes(path), path=path).rolled_back()
            except TableServiceError as e:
                raise e.with_context(table=self.data.name) from e
        return self.data.rollback_metadata(instant).commits_rollback

    def storage_partitions(self) -> list[str]:
        """The metadata partitions on storage: every top-level folder but `.hoodie` (one listing; a partition that
        never received a record may lack `.hoodie_partition_metadata`)."""
        entries = self.mdt.storage.list(self.mdt.base_path)
        return sorted(fi.name for fi in entries if fi.is_dir and not fi.name.startswith("."))

    def partition_listing(self, partition: str) -> list[FileInfo]:
        """The files of one metadata partition (one listing of its folder; partitions hold no sub-folders)."""
        folder = join(self.mdt.base_path, partition)
        return [fi for fi in self.mdt.storage.list(folder) if not fi.is_dir]

    def view(self, partition: str) -> FileSystemView:
        """The file-system view of one metadata partition (one listing of its folder, kept for this snapshot)."""
        if partition not in self._views:
            listing = {partition: self.partition_listing(partition)}
            self._views[partition] = self.mdt.file_system_view(timeline=self.mdt_timeline, listing=listing)
        return self._views[partition]

    def file_slices(self, partition: str) -> list[FileSlice]:
        """The latest file slices of one metadata partition for reading (a slice a pending compaction opened is
        merged with the one before it), ordered by file id (file group index)."""
        return sorted(self.view(partition).latest_merged_slices(partition), key=lambda s: s.file_id)

    def latest_slices(self, partition: str) -> dict[str, FileSlice]:
        """file id -> the slice new log files join (table version 6 names them by its base instant); the slice a
        pending compaction opened when there is one."""
        return {s.file_id: s for s in self.view(partition).latest_slices(partition)}

    def writer_schema(self) -> str | None:
        """The record schema (JSON text) the table's files were written with: from the `files` partition's base
        file (small; every metadata table has one), else from the first other partition whose base file has one."""
        ordered = sorted(self.partitions, key=lambda p: p != MetadataPartition.FILES.value)
        for partition in ordered:
            slices = [s for s in self.file_slices(partition) if s.base_file is not None]
            for file_slice in sorted(slices, key=lambda s: s.base_instant_time, reverse=True):
                assert file_slice.base_file is not None
                location = file_slice.base_file.location
                text = read_hfile(self.mdt.storage.read_bytes(location), path=location).file_info.get(b"schema")
                if text:
                    return text.decode("utf-8")
        return None

    def read_partition(self, partition: str) -> dict[str, dict[str, Any]]:
        """Every live record of a metadata partition by key, merged oldest first by the partition's rule."""
        merge = merge_for(partition)
        merged: dict[str, RawRecord] = {}
        for file_slice in self.file_slices(partition):
            for key, record in self.slice_records(file_slice):
                merged[key] = merge(merged[key], record) if key in merged else record
        return {k: v for k, v in merged.items() if v is not None and is_live(v)}

    def file_listing(self) -> dict[str, dict[str, int]]:
        """The `files` partition: data partition path ("" when not partitioned) -> file name -> size in bytes,
        for every partition named in `__all_partitions__` (a partition without a file list lists nothing)."""
        records = self.read_partition(MetadataPartition.FILES.value)
        partitions = live_files(records.get(ALL_PARTITIONS_KEY))
        out: dict[str, dict[str, int]] = {}
        for name in partitions:
            path = "" if name == NON_PARTITIONED else name
            out[path] = live_files(records.get(name))
        return out

    def slice_records(self, file_slice: FileSlice) -> Iterator[tuple[str, RawRecord]]:
        """The records of one slice in the order they apply: base file cells, then valid log blocks."""
        storage = self.mdt.storage
        if file_slice.base_file is not None:
            location = file_slice.base_file.location
            yield from _hfile_records(storage.read_bytes(location), location)
        locations = [lf.location for lf in file_slice.log_files]
        scan = scan_log_blocks(
            storage, locations, _ValidBlocks(self.valid_instants()), table=self.data.name, hfile_blocks=True
        )
        for block in scan.blocks:
            if block.block_type is BlockType.HFILE_DATA:
                yield from _hfile_records(
                    read_block_content(block, storage), block.location, block.header.get(HeaderKey.SCHEMA)
                )
            elif block.block_type is BlockType.DELETE:
                for key in _deleted_keys(read_block_content(block, storage), block):
                    yield key, None


def _hfile_records(data: bytes, path: str, schema: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """The cells of an HFile as (key, record), decoded with the file's own schema (file info), else `schema` (the
    log block's SCHEMA header)."""
    hfile = read_hfile(data, path=path)
    if not hfile.cells:
        return
    text = hfile.file_info.get(b"schema")
    if text:
        try:
            decoded = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptFileError(f"HFile schema (file info) is not UTF-8: {e}", path=path) from e
        parsed = _parsed_schema(decoded, path)
    elif schema:
        parsed = _parsed_schema(schema, path)
    else:
        raise CorruptFileError("HFile has cells but no Avro schema", path=path)
    for row, value in hfile.cells:
        try:
            key = row.decode("utf-8")
            record = fastavro.schemaless_reader(
                io.BytesIO(value), parsed, None, return_record_name=True, return_record_name_override=True
            )
        except Exception as e:  # fastavro raises many kinds of errors on bad bytes
            raise CorruptFileError(f"HFile cell {row[:64]!r}: {type(e).__name__}: {e}", path=path) from e
        if not isinstance(record, dict):
            raise CorruptFileError(f"HFile cell {row[:64]!r} is not a record", path=path)
        yield key, record


@functools.lru_cache(maxsize=16)
def _parsed(text: str) -> Any:
    schema = json.loads(text)
    unbounded = zero_width_array(schema)
    if unbounded is not None:
        raise ValueError(f"the schema has an {unbounded}")
    return fastavro.parse_schema(schema)


def _parsed_schema(text: str, path: str) -> Any:
    """A record schema parsed once per text: every HFile and log block of a metadata table carries the same one."""
    try:
        return _parsed(text)
    except Exception as e:  # json and fastavro raise several types for a bad schema
        raise CorruptFileError(f"HFile schema does not parse: {e}", path=path) from e


def _deleted_keys(content: bytes, block: LogBlock) -> list[str]:
    try:
        table = decode_delete_content(content)
    except TableServiceError as e:
        raise e.with_context(path=block.location) from e
    return [k for k in table.column("record_key").to_pylist() if k is not None]
