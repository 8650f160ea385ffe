"""Reading Hudi base files (Parquet): the footer Hudi writes and the rows, one row group at a time.

Footer keys Hudi reads: `hoodie_min_record_key` / `hoodie_max_record_key`, the bloom filter under
`org.apache.hudi.bloomfilter` (older files: `com.uber.hoodie.bloomfilter`) with its type in
`hoodie_bloom_filter_type_code` (absent: SIMPLE), and parquet-avro's `parquet.avro.schema` (absent in files
Hudi's Spark row writer produced, whose root is `spark_schema`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tableservice.errors import CorruptFileError
from tableservice.hudi.file_group.bloom import (
    BLOOM_FILTER_FOOTER_KEY,
    BLOOM_FILTER_TYPE_CODE_FOOTER_KEY,
    OLD_BLOOM_FILTER_FOOTER_KEY,
    BloomFilterTypeCode,
    DynamicBloomFilter,
    SimpleBloomFilter,
    bloom_filter_from_string,
)
from tableservice.storage import Storage

MIN_RECORD_KEY_FOOTER_KEY = "hoodie_min_record_key"
MAX_RECORD_KEY_FOOTER_KEY = "hoodie_max_record_key"
AVRO_SCHEMA_FOOTER_KEY = "parquet.avro.schema"
WRITER_MODEL_FOOTER_KEY = "writer.model.name"


@dataclass(frozen=True)
class RowGroupInfo:
    num_rows: int
    total_byte_size: int
    total_compressed_size: int


@dataclass(frozen=True)
class BaseFileFooter:
    """The parts of a base file's footer Hudi uses; the bloom filter is decoded on demand."""

    location: str
    num_rows: int
    row_groups: tuple[RowGroupInfo, ...]
    min_record_key: str | None
    max_record_key: str | None
    bloom_filter_type: BloomFilterTypeCode | None
    bloom_filter_serialized: str | None = field(repr=False)
    avro_schema_json: str | None = field(repr=False)
    created_by: str
    arrow_schema: pa.Schema = field(repr=False)
    key_value_metadata: dict[str, str] = field(repr=False)

    @property
    def avro_schema(self) -> dict[str, Any] | None:
        return json.loads(self.avro_schema_json) if self.avro_schema_json is not None else None

    def bloom_filter(self) -> SimpleBloomFilter | DynamicBloomFilter | None:
        if self.bloom_filter_serialized is None:
            return None
        return bloom_filter_from_string(self.bloom_filter_serialized, self.bloom_filter_type, path=self.location)


def _open_parquet(storage: Storage, location: str) -> tuple[pa.NativeFile, pq.ParquetFile]:
    source = storage.open_input_file(location)
    try:
        return source, pq.ParquetFile(source)
    except (pa.ArrowInvalid, OSError) as e:
        source.close()
        raise CorruptFileError(f"not a readable Parquet file: {e}", path=location) from e


def read_base_file_footer(storage: Storage, location: str) -> BaseFileFooter:
    """The footer of a base file: record key range, bloom filter, Avro schema, row counts."""
    source, pf = _open_parquet(storage, location)
    try:
        md = pf.metadata
        kv = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in (md.metadata or {}).items()}
        serialized = kv.get(BLOOM_FILTER_FOOTER_KEY, kv.get(OLD_BLOOM_FILTER_FOOTER_KEY))
        code_name = kv.get(BLOOM_FILTER_TYPE_CODE_FOOTER_KEY)
        try:
            code = BloomFilterTypeCode.parse(code_name) if code_name is not None else None
        except ValueError as e:
            raise CorruptFileError(f"unknown bloom filter type code {code_name!r}", path=location) from e
        if serialized is not None and code is None:
            code = BloomFilterTypeCode.SIMPLE
        groups = tuple(
            RowGroupInfo(
                num_rows=md.row_group(i).num_rows,
                total_byte_size=md.row_group(i).total_byte_size,
                total_compressed_size=sum(
                    md.row_group(i).column(c).total_compressed_size for c in range(md.row_group(i).num_columns)
                ),
            )
            for i in range(md.num_row_groups)
        )
        return BaseFileFooter(
            location=location,
            num_rows=md.num_rows,
            row_groups=groups,
            min_record_key=kv.get(MIN_RECORD_KEY_FOOTER_KEY),
            max_record_key=kv.get(MAX_RECORD_KEY_FOOTER_KEY),
            bloom_filter_type=code,
            bloom_filter_serialized=serialized,
            avro_schema_json=kv.get(AVRO_SCHEMA_FOOTER_KEY),
            created_by=md.created_by or "",
            arrow_schema=pf.schema_arrow.remove_metadata(),
            key_value_metadata=kv,
        )
    finally:
        source.close()


def iter_base_file(
    storage: Storage, location: str, columns: list[str] | None = None, batch_rows: int = 65536
) -> Iterator[pa.RecordBatch]:
    """The rows of a base file as record batches, read one row group at a time, in file order.

    Arrow types are exactly those pyarrow reads from the file (no metadata on the schema).
    """
    source, pf = _open_parquet(storage, location)
    try:
        for i in range(pf.metadata.num_row_groups):
            try:
                table = pf.read_row_group(i, columns=columns, use_threads=False)
            except (pa.ArrowInvalid, OSError) as e:
                raise CorruptFileError(f"cannot read row group {i}: {e}", path=location) from e
            table = table.replace_schema_metadata(None)
            yield from table.to_batches(max_chunksize=batch_rows)
    finally:
        source.close()
