"""Hudi base files (Parquet): write them as Hudi's Avro writer does, read their footers and rows.

Writing: `BaseFileWriter` / `write_base_file` take Arrow record batches in the table's Avro schema order,
stream them out through `Storage.open_output_stream` one row group at a time (memory is bounded by one
row group), feed every record key, in file order, to Hudi's bloom filter and track the min/max key, and
finish the file with the footer Hudi writes (see `avro_parquet` for the schema layout). The footer's
key/value metadata is, in this order (the order real files have): `parquet.avro.schema`,
`writer.model.name=avro`, `hoodie_bloom_filter_type_code` (DYNAMIC_* only), `org.apache.hudi.bloomfilter`,
`hoodie_min_record_key`, `hoodie_max_record_key` (absent for an empty file), then any extra entries.

Defaults follow Hudi's: gzip (`hoodie.parquet.compression.codec`, level 6 as Hadoop's zlib default),
1 MiB pages and dictionary pages (`hoodie.parquet.page.size`), dictionary encoding on except for the columns
whose first page fails parquet-mr's test (written PLAIN, as parquet-mr falls back: `dictionary_write`), row groups
of 120 MiB (`hoodie.parquet.block.size`), Parquet format 1.0 data pages (PLAIN_DICTIONARY), page indexes on.
Min/max record keys compare as Java's `String.compareTo` (UTF-16 code units).

Differences from files parquet-mr writes that remain (none changes what a reader gets back):
- `created_by` is pyarrow's (`parquet-cpp-arrow version N`), not `parquet-mr version ...`;
- the row group size is measured on the Arrow in-memory size of the buffered batches, not on
  parquet-mr's encoded buffer size, so row groups hold fewer rows than parquet-mr's for the same setting;
- gzip streams come from zlib, not Java's Deflater: same data, other compressed bytes and sizes;
- column chunks list encodings `PLAIN_DICTIONARY, RLE` / `PLAIN, RLE` (parquet-mr also lists BIT_PACKED
  for its level encoding); chunk statistics carry only `min_value`/`max_value` (parquet-mr also fills the
  deprecated `min`/`max`), plus Arrow's `is_*_exact` flags and size statistics;
- which columns fall back to PLAIN is decided once per file, on its first row group's first page (parquet-mr
  decides per column chunk), from an estimated distinct count; a dictionary that outgrows its page limit later
  falls back as Arrow's writer does (behind a dictionary page); page boundaries follow Arrow's rules, so pages
  split at other rows.
Not supported (UnsupportedTableError): unions other than [null, T], decimal on Avro bytes, decimal in a
fixed of non-minimal size, timestamp-nanos, recursive records, arrays holding null elements (parquet-avro
also refuses them).
"""

from __future__ import annotations

import contextlib
import logging
import struct
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tableservice.errors import CorruptFileError, StorageError, UnsupportedTableError
from tableservice.hudi.file_group.avro_parquet import avro_to_arrow_schema, parse_avro_schema, patch_footer
from tableservice.hudi.file_group.base_file_reader import (
    AVRO_SCHEMA_FOOTER_KEY,
    MAX_RECORD_KEY_FOOTER_KEY,
    MIN_RECORD_KEY_FOOTER_KEY,
    WRITER_MODEL_FOOTER_KEY,
    BaseFileFooter,
    RowGroupInfo,
    iter_base_file,
    read_base_file_footer,
)
from tableservice.hudi.file_group.base_file_values import check_no_null_elements, java_string_min_max, utf16
from tableservice.hudi.file_group.bloom import (
    BLOOM_FILTER_FOOTER_KEY,
    BLOOM_FILTER_TYPE_CODE_FOOTER_KEY,
    BloomFilterSettings,
    BloomFilterTypeCode,
    create_bloom_filter,
)
from tableservice.hudi.file_group.dictionary_read import with_dictionaries
from tableservice.hudi.file_group.dictionary_write import dictionary_setting, leaf_paths, plain_columns
from tableservice.hudi.file_group.thrift_compact import ThriftError, decode_struct, encode_struct
from tableservice.storage import Storage

__all__ = [
    "AVRO_SCHEMA_FOOTER_KEY",
    "MAX_RECORD_KEY_FOOTER_KEY",
    "MIN_RECORD_KEY_FOOTER_KEY",
    "WRITER_MODEL_FOOTER_KEY",
    "BaseFileFooter",
    "BaseFileWriteResult",
    "BaseFileWriter",
    "RowGroupInfo",
    "iter_base_file",
    "java_string_min_max",
    "read_base_file_footer",
    "write_base_file",
]

RECORD_KEY_COLUMN = "_hoodie_record_key"
FILE_NAME_COLUMN = "_hoodie_file_name"

DEFAULT_ROW_GROUP_BYTES = 120 * 1024 * 1024
DEFAULT_PAGE_BYTES = 1024 * 1024
_MAGIC = b"PAR1"


@dataclass(frozen=True)
class BaseFileWriteResult:
    """What a finished base file holds (the inputs of a Hudi write stat)."""

    location: str
    num_rows: int
    file_size: int
    min_record_key: str | None
    max_record_key: str | None
    total_uncompressed_bytes: int
    num_row_groups: int
    bloom_filter_type: BloomFilterTypeCode | None
    footer_metadata: dict[str, str] = field(repr=False)


log = logging.getLogger(__name__)

_PYARROW_CODECS = {"lz4": "lz4_raw", "uncompressed": "none"}
"""Hudi's codec names (`hoodie.parquet.compression.codec`) that pyarrow spells otherwise."""


def _codec_available(codec: str) -> bool:
    """Whether pyarrow writes Parquet with this codec (checked when a writer is made, as pyarrow's own writer is
    made only with the first row group)."""
    try:
        return bool(pa.Codec.is_available(codec))
    except ValueError:  # a name pyarrow does not know
        return False


class _TailCapturingSink:
    """A file object for pyarrow that passes bytes through, except those written while capturing."""

    def __init__(self, out: pa.NativeFile) -> None:
        self._out = out
        self._pos = 0
        self.captured: bytearray | None = None
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if self.captured is not None:
            self.captured += view
        else:
            self._out.write(view)
        self._pos += len(view)
        return len(view)

    def tell(self) -> int:
        return self._pos

    def flush(self) -> None:
        return None

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


class BaseFileWriter:
    """Streams one base file. Use as a context manager or call `close()`; `abort()` drops the output.

    - `avro_schema`: the table's writer schema with meta fields, as Hudi passes it to parquet-avro; pass the
      JSON text when you have it (it is stored verbatim as `parquet.avro.schema`), a dict is dumped compactly.
    - `record_key_column` / `record_keys`: where the record keys come from (a column, or a function of the
      batch, e.g. a key generator when meta fields are not populated). `bloom=None` writes no bloom filter
      and, as in Hudi, no min/max keys.
    - `row_group_bytes`: Arrow in-memory bytes buffered before a row group is written (a batch is never
      split by bytes); `max_row_group_rows` also caps rows per row group.
    - `file_name`: when set, `_hoodie_file_name` is overwritten with it on every row.
    - `dictionary_columns`: string or binary columns that come as Arrow dictionaries (`dictionary_read`), written
      from their indices without hashing every value again (never the record key column, `_hoodie_file_name`, or
      a column `record_keys` reads); the file is the same as for the plain column.
    Batches are cast to `arrow_schema` (column order and types); absent nullable columns become nulls; a
    column the schema lacks, or an absent required one, is a ValueError.
    """

    def __init__(
        self,
        storage: Storage,
        location: str,
        *,
        avro_schema: Mapping[str, Any] | str,
        record_key_column: str | None = RECORD_KEY_COLUMN,
        record_keys: Callable[[pa.RecordBatch], pa.Array] | None = None,
        bloom: BloomFilterSettings | None = BloomFilterSettings(),  # noqa: B008 - frozen value
        compression: str = "gzip",
        compression_level: int | None = None,
        row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
        max_row_group_rows: int | None = None,
        page_bytes: int = DEFAULT_PAGE_BYTES,
        dictionary: bool = True,
        file_name: str | None = None,
        extra_footer_metadata: Mapping[str, str] | None = None,
        dictionary_columns: Collection[str] = (),
    ) -> None:
        self.storage = storage
        self.location = location
        self._avro, self._avro_text = parse_avro_schema(avro_schema)
        self.arrow_schema = avro_to_arrow_schema(self._avro)
        if (
            record_key_column is not None
            and record_keys is None
            and self.arrow_schema.get_field_index(record_key_column) < 0
        ):
            raise ValueError(f"record key column {record_key_column!r} is not in the schema")
        # What the batches hold and pyarrow writes: `arrow_schema`, with `dictionary_columns` as dictionaries (the
        # Parquet schema and statistics are those of the value type; the footer's schema comes from Avro anyway).
        # `_hoodie_file_name`, when the writer fills it in, is one value: a dictionary of it (written without hashing
        # every row's copy; the same chunk as the repeated string).
        name_field = self.arrow_schema.get_field_index(FILE_NAME_COLUMN)
        self._name_index = name_field if file_name is not None else -1
        if self._name_index >= 0 and not pa.types.is_string(self.arrow_schema.field(name_field).type):
            raise ValueError(f"{FILE_NAME_COLUMN} is not a string column: {self.arrow_schema.field(name_field).type}")
        dictionaries = set(dictionary_columns) - {FILE_NAME_COLUMN, record_key_column}
        if self._name_index >= 0:
            dictionaries.add(FILE_NAME_COLUMN)
        self._write_schema = with_dictionaries(self.arrow_schema, dictionaries)
        self._key_column = record_key_column
        self._record_keys = record_keys
        self._bloom = (
            create_bloom_filter(bloom.num_entries, bloom.fpp, bloom.dynamic_max_entries, bloom.type_code)
            if bloom is not None
            else None
        )
        self._file_name = file_name
        self._extra = dict(extra_footer_metadata or {})
        self._row_group_bytes = row_group_bytes
        self._max_rows = max_row_group_rows
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0
        self._pending_rows = 0
        self.num_rows = 0
        self._min: str | None = None
        self._max: str | None = None
        self._closed = False
        self._result: BaseFileWriteResult | None = None
        codec = compression.lower()
        codec = _PYARROW_CODECS.get(codec, codec)
        if compression_level is None and codec == "gzip":
            compression_level = 6
        if codec != "none" and not _codec_available(codec):
            raise ValueError(f"Parquet compression codec {compression!r} is not available")
        self._codec = codec
        self._compression_level = compression_level
        self._page_bytes = page_bytes
        self._dictionary = dictionary
        self._arrow_dictionaries = dictionaries
        self._writer: pq.ParquetWriter | None = None  # opened with the first row group (`_open`)
        self._out = storage.open_output_stream(location)
        self._sink = _TailCapturingSink(self._out)

    def _open(self, first: pa.Table | None) -> pq.ParquetWriter:
        """pyarrow's writer, made when the first row group is ready: its dictionary setting follows parquet-mr's
        first-page test on those rows (`dictionary_write`), so that columns of mostly distinct values are written
        PLAIN, as Hudi's writers write them, without Arrow hashing them into a dictionary first."""
        use: bool | list[str] = self._dictionary
        if self._dictionary and first is not None and first.num_rows:
            try:
                plain = plain_columns(first, self._page_bytes, skip=self._arrow_dictionaries)
                use = dictionary_setting(self._write_schema, leaf_paths(self._write_schema), plain)
            except (pa.ArrowException, ValueError, TypeError) as e:  # the test only saves work: write as Arrow does
                log.warning("dictionary test failed for %s, every column gets a dictionary: %s", self.location, e)
        self._writer = pq.ParquetWriter(
            self._sink,
            self._write_schema,
            version="1.0",
            data_page_version="1.0",
            compression=self._codec,
            compression_level=self._compression_level,
            use_dictionary=use,
            data_page_size=self._page_bytes,
            dictionary_pagesize_limit=self._page_bytes,
            write_statistics=True,
            write_page_index=True,
            store_schema=False,
            use_compliant_nested_type=True,
        )
        return self._writer

    # --- writing -----------------------------------------------------------------------------------

    @property
    def bytes_written(self) -> int:
        """Bytes already in the output stream (flushed row groups); grows one row group at a time."""
        return self._sink.tell()

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if batch.schema.equals(self._write_schema):
            out = batch
            if self._name_index >= 0:
                field = self._write_schema.field(self._name_index)
                out = out.set_column(self._name_index, field, self._file_name_column(out.num_rows))
        else:
            columns = []
            for i, f in enumerate(self._write_schema):
                if i == self._name_index:
                    columns.append(pa.nulls(0, f.type))  # filled in below
                    continue
                idx = batch.schema.get_field_index(f.name)
                if idx < 0:
                    if not f.nullable:
                        raise ValueError(f"batch lacks required column {f.name!r}")
                    columns.append(pa.nulls(batch.num_rows, f.type))
                    continue
                col = batch.column(idx)
                if not col.type.equals(f.type):
                    try:
                        col = col.cast(f.type)
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                        raise ValueError(f"column {f.name!r} of type {col.type} does not fit {f.type}: {e}") from e
                columns.append(col)
            extra = set(batch.schema.names) - set(self.arrow_schema.names)
            if extra:
                raise ValueError(f"batch has columns that are not in the Avro schema: {sorted(extra)}")
            if self._name_index >= 0:
                columns[self._name_index] = self._file_name_column(batch.num_rows)
            out = pa.RecordBatch.from_arrays(columns, schema=self._write_schema)
        for i, f in enumerate(self.arrow_schema):
            col = out.column(i)
            if not f.nullable and col.null_count:
                raise UnsupportedTableError(f"required column {f.name!r} holds nulls", path=self.location)
            check_no_null_elements(col, f.name)
        return out

    def _file_name_column(self, rows: int) -> pa.Array:
        return pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(rows, dtype=np.int32)), pa.array([self._file_name], pa.string())
        )

    def _track_keys(self, batch: pa.RecordBatch) -> None:
        if self._record_keys is not None:
            keys = self._record_keys(batch)
        elif self._key_column is not None:
            keys = batch.column(self._key_column)
        else:
            return
        if keys.null_count:
            raise ValueError(f"a record key is null in the batch written to {self.location}")
        if self._bloom is not None:
            if len(keys) and pc.min(pc.binary_length(keys)).as_py() == 0:
                raise ValueError(f"a record key is empty in the batch written to {self.location}")
            self._bloom.add_many(keys)
            mm = java_string_min_max(keys)
            if mm is not None:
                lo, hi = mm
                if self._min is None or utf16(lo) < utf16(self._min):
                    self._min = lo
                if self._max is None or utf16(hi) > utf16(self._max):
                    self._max = hi

    def write(self, data: pa.RecordBatch | pa.Table) -> None:
        """Add rows (in order); a row group is written whenever enough rows are buffered."""
        if self._closed:
            raise ValueError("writer is closed")
        batches = data.to_batches() if isinstance(data, pa.Table) else [data]
        for raw in batches:
            if raw.num_rows == 0:
                continue
            batch = self._conform(raw)
            self._track_keys(batch)
            self._pending.append(batch)
            self._pending_bytes += batch.nbytes
            self._pending_rows += batch.num_rows
            self.num_rows += batch.num_rows
            if self._pending_bytes >= self._row_group_bytes:
                self._flush()
            elif self._max_rows is not None and self._pending_rows >= self._max_rows:
                self._flush(everything=False)

    def _flush(self, *, everything: bool = True) -> None:
        """Write buffered rows as row groups of at most `max_row_group_rows` rows; unless `everything`,
        a last partial group stays buffered."""
        if not self._pending:
            return
        table = pa.Table.from_batches(self._pending, schema=self._write_schema)
        limit = self._max_rows or table.num_rows
        start = 0
        while start < table.num_rows and (everything or table.num_rows - start >= limit):
            part = table.slice(start, limit)
            writer = self._writer if self._writer is not None else self._open(part)
            writer.write_table(part, row_group_size=part.num_rows)
            start += part.num_rows
        rest = table.slice(start)
        self._pending = rest.to_batches() if rest.num_rows else []
        self._pending_rows = rest.num_rows
        self._pending_bytes = rest.nbytes if rest.num_rows else 0

    def _footer_metadata(self) -> list[tuple[str, str]]:
        kv = [(AVRO_SCHEMA_FOOTER_KEY, self._avro_text), (WRITER_MODEL_FOOTER_KEY, "avro")]
        if self._bloom is not None:
            if self._bloom.type_code.value.startswith("DYNAMIC"):
                kv.append((BLOOM_FILTER_TYPE_CODE_FOOTER_KEY, self._bloom.type_code.value))
            kv.append((BLOOM_FILTER_FOOTER_KEY, self._bloom.serialize()))
            if self._min is not None and self._max is not None:
                kv.append((MIN_RECORD_KEY_FOOTER_KEY, self._min))
                kv.append((MAX_RECORD_KEY_FOOTER_KEY, self._max))
        kv.extend((k, v) for k, v in self._extra.items() if k not in dict(kv))
        return kv

    def close(self) -> BaseFileWriteResult:
        """Write the last row group and the footer, close the stream; returns what was written."""
        if self._result is not None:
            return self._result
        if self._closed:
            raise ValueError("writer was aborted")
        try:
            self._flush()
            writer = self._writer if self._writer is not None else self._open(None)
            self._sink.captured = bytearray()
            writer.close()
            tail = bytes(self._sink.captured)
            self._sink.captured = None
            if len(tail) < 12 or tail[-4:] != _MAGIC:
                raise CorruptFileError("pyarrow wrote no Parquet footer", path=self.location)
            (footer_len,) = struct.unpack("<i", tail[-8:-4])
            footer, used = decode_struct(tail[-8 - footer_len : -8])
            if used != footer_len:
                raise CorruptFileError("footer length mismatch in pyarrow's output", path=self.location)
            kv = self._footer_metadata()
            new_footer = encode_struct(patch_footer(footer, self._avro, kv))
            self._out.write(tail[: -8 - footer_len])
            self._out.write(new_footer + struct.pack("<i", len(new_footer)) + _MAGIC)
            file_size = self._sink.tell() - len(tail) + (len(tail) - 8 - footer_len) + len(new_footer) + 8
            self._out.close()
        except ThriftError as e:
            self.abort()
            raise CorruptFileError(f"cannot re-encode the Parquet footer: {e}", path=self.location) from e
        except BaseException:
            self.abort()
            raise
        self._closed = True
        row_groups = footer.get(4).items if footer.get(4) is not None else []
        self._result = BaseFileWriteResult(
            location=self.location,
            num_rows=self.num_rows,
            file_size=file_size,
            min_record_key=self._min,
            max_record_key=self._max,
            total_uncompressed_bytes=sum(int(rg.get(2) or 0) for rg in row_groups),
            num_row_groups=len(row_groups),
            bloom_filter_type=self._bloom.type_code if self._bloom is not None else None,
            footer_metadata=dict(kv),
        )
        return self._result

    def abort(self) -> None:
        """Stop writing and delete whatever reached storage."""
        if self._closed:
            return
        self._closed = True
        closers = [self._out.close] if self._writer is None else [self._writer.close, self._out.close]
        for closer in closers:
            with contextlib.suppress(Exception):  # best effort: the file is deleted below
                closer()
        with contextlib.suppress(StorageError):
            self.storage.delete(self.location)

    def __enter__(self) -> BaseFileWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_base_file(
    storage: Storage,
    location: str,
    batches: Iterable[pa.RecordBatch] | pa.Table,
    *,
    avro_schema: Mapping[str, Any] | str,
    record_key_column: str | None = RECORD_KEY_COLUMN,
    record_keys: Callable[[pa.RecordBatch], pa.Array] | None = None,
    bloom: BloomFilterSettings | None = BloomFilterSettings(),  # noqa: B008 - frozen value
    compression: str = "gzip",
    compression_level: int | None = None,
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    max_row_group_rows: int | None = None,
    page_bytes: int = DEFAULT_PAGE_BYTES,
    dictionary: bool = True,
    file_name: str | None = None,
    extra_footer_metadata: Mapping[str, str] | None = None,
    dictionary_columns: Collection[str] = (),
) -> BaseFileWriteResult:
    """Write a whole base file from batches (or a table), streaming; options as for `BaseFileWriter`.

    On any error the partial file is deleted.
    """
    writer = BaseFileWriter(
        storage,
        location,
        avro_schema=avro_schema,
        record_key_column=record_key_column,
        record_keys=record_keys,
        bloom=bloom,
        compression=compression,
        compression_level=compression_level,
        row_group_bytes=row_group_bytes,
        max_row_group_rows=max_row_group_rows,
        page_bytes=page_bytes,
        dictionary=dictionary,
        file_name=file_name,
        extra_footer_metadata=extra_footer_metadata,
        dictionary_columns=dictionary_columns,
    )
    try:
        if isinstance(batches, pa.Table):
            writer.write(batches)
        else:
            for batch in batches:
                writer.write(batch)
    except BaseException:
        writer.abort()
        raise
    return writer.close()
