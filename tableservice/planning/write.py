"""How the daemon writes the base files of its compactions and clusterings, with Hudi's storage keys
(`HoodieStorageConfig`), so that a table's files come out as its writers' do.

- `hoodie.parquet.compression.codec` (gzip): the Parquet codec; snappy, zstd, lz4, brotli or uncompressed.
- `hoodie.parquet.bloom.filter.enabled` (true): write the record keys' bloom filter into each file's footer. Hudi
  writes it when this is true or when `hoodie.index.type` names a bloom index, and never for a table that does not
  populate its meta fields. Tables indexed otherwise (record index, bucket, simple) can set it false to save the
  CPU it costs: 30 hash passes per key at Hudi's default false-positive rate, a sixth of a compaction's CPU on
  500k-row slices (measured on a 2-core VM).
- `hoodie.index.bloom.num_entries` (60000), `hoodie.index.bloom.fpp` (1e-9), `hoodie.bloom.index.filter.type`
  (DYNAMIC_V0 or SIMPLE), `hoodie.bloom.index.filter.dynamic.max.entries` (100000): the filter's size. One filter
  (one row of a dynamic one) is at most `MAX_BLOOM_BITS` bits: the writer holds a byte per bit while it writes.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

from pydantic import Field, field_validator, model_validator

from tableservice.hudi.file_group.bloom import (
    DEFAULT_DYNAMIC_MAX_ENTRIES,
    DEFAULT_FPP,
    DEFAULT_NUM_ENTRIES,
    BloomFilterSettings,
    BloomFilterTypeCode,
    bit_size,
)
from tableservice.planning.keyed_policy import HudiKeyedPolicy

CODECS = ("gzip", "snappy", "zstd", "lz4", "lz4_raw", "brotli", "uncompressed")
"""The Parquet codecs Hudi's key names that the writer can write (not LZO)."""

MAX_BLOOM_ENTRIES = 100_000_000  # keys one filter is sized for: beyond it, a typo
MAX_BLOOM_BITS = 1 << 30  # bits of one filter (Hudi's `getBitSize`): a 1 GiB bool vector in the writer, 128 MiB in Java


class WritePolicy(HudiKeyedPolicy):
    """Frozen; build it with Hudi's keys (`WritePolicy.from_mapping({...})`) or attribute names."""

    service_name: ClassVar[str] = "write"
    own_prefixes: ClassVar[tuple[str, ...]] = ("hoodie.parquet.", "hoodie.index.bloom.", "hoodie.bloom.index.filter.")

    compression_codec: str = Field(
        default="gzip",
        validation_alias="hoodie.parquet.compression.codec",
        serialization_alias="hoodie.parquet.compression.codec",
    )
    bloom_filter_enabled: bool = Field(
        default=True,
        validation_alias="hoodie.parquet.bloom.filter.enabled",
        serialization_alias="hoodie.parquet.bloom.filter.enabled",
    )
    index_type: str | None = Field(
        default=None, validation_alias="hoodie.index.type", serialization_alias="hoodie.index.type"
    )
    bloom_num_entries: int = Field(
        default=DEFAULT_NUM_ENTRIES,
        ge=1,
        le=MAX_BLOOM_ENTRIES,
        validation_alias="hoodie.index.bloom.num_entries",
        serialization_alias="hoodie.index.bloom.num_entries",
    )
    bloom_fpp: float = Field(
        default=DEFAULT_FPP,
        gt=0.0,
        lt=1.0,
        validation_alias="hoodie.index.bloom.fpp",
        serialization_alias="hoodie.index.bloom.fpp",
    )
    bloom_filter_type: str = Field(
        default=BloomFilterTypeCode.DYNAMIC_V0.value,
        validation_alias="hoodie.bloom.index.filter.type",
        serialization_alias="hoodie.bloom.index.filter.type",
    )
    bloom_dynamic_max_entries: int = Field(
        default=DEFAULT_DYNAMIC_MAX_ENTRIES,
        ge=1,
        le=MAX_BLOOM_ENTRIES,
        validation_alias="hoodie.bloom.index.filter.dynamic.max.entries",
        serialization_alias="hoodie.bloom.index.filter.dynamic.max.entries",
    )

    @field_validator("compression_codec", mode="before")
    @classmethod
    def _codec(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        codec = value.strip().lower()
        if codec == "lzo":
            raise ValueError("LZO is not written by this daemon's Parquet writer; use one of " + ", ".join(CODECS))
        if codec not in CODECS:
            raise ValueError(f"expected one of {', '.join(CODECS)}")
        return codec

    @field_validator("index_type", mode="before")
    @classmethod
    def _index_type(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("bloom_filter_type", mode="before")
    @classmethod
    def _filter_type(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return BloomFilterTypeCode.parse(value).value
        except ValueError:
            raise ValueError("expected DYNAMIC_V0 or SIMPLE") from None

    @model_validator(mode="after")
    def _filter_size(self) -> Self:
        bits = bit_size(self.bloom_num_entries, self.bloom_fpp)
        if bits > MAX_BLOOM_BITS:
            raise ValueError(
                f"a bloom filter for hoodie.index.bloom.num_entries={self.bloom_num_entries} at "
                f"hoodie.index.bloom.fpp={self.bloom_fpp} takes {bits:,} bits, more than {MAX_BLOOM_BITS:,}"
            )
        return self

    def bloom_filter(self, populate_meta_fields: bool) -> BloomFilterSettings | None:
        """The bloom filter Hudi's writers put in a base file of this table, or None when they write none."""
        wanted = self.bloom_filter_enabled or (self.index_type is not None and "BLOOM" in self.index_type)
        if not (populate_meta_fields and wanted):
            return None
        return BloomFilterSettings(
            num_entries=self.bloom_num_entries,
            fpp=self.bloom_fpp,
            type_code=BloomFilterTypeCode.parse(self.bloom_filter_type),
            dynamic_max_entries=self.bloom_dynamic_max_entries,
        )
