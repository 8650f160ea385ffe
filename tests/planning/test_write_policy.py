"""The `write` keys: Hudi's rule for when a base file carries a bloom filter, the filter's size, the codec."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tableservice.errors import ConfigError
from tableservice.hudi.file_group.base_file import write_base_file
from tableservice.hudi.file_group.bloom import BloomFilterSettings, BloomFilterTypeCode
from tableservice.planning.write import WritePolicy
from tableservice.storage import Storage


def test_defaults_are_hudis() -> None:
    policy = WritePolicy()
    assert policy.compression_codec == "gzip"
    assert policy.bloom_filter(populate_meta_fields=True) == BloomFilterSettings(
        num_entries=60000, fpp=1e-9, type_code=BloomFilterTypeCode.DYNAMIC_V0, dynamic_max_entries=100000
    )


@pytest.mark.parametrize(
    ("keys", "populate_meta_fields", "written"),
    [
        ({"hoodie.parquet.bloom.filter.enabled": "false"}, True, False),
        ({"hoodie.parquet.bloom.filter.enabled": False, "hoodie.index.type": "RECORD_INDEX"}, True, False),
        ({"hoodie.parquet.bloom.filter.enabled": "false", "hoodie.index.type": "bloom"}, True, True),
        ({"hoodie.parquet.bloom.filter.enabled": "false", "hoodie.index.type": "GLOBAL_BLOOM"}, True, True),
        ({}, False, False),  # no meta fields: no record key column to index
        ({"hoodie.index.type": "BLOOM"}, False, False),
    ],
)
def test_a_bloom_filter_is_written_when_hudi_writes_one(
    keys: dict[str, object], populate_meta_fields: bool, written: bool
) -> None:
    policy = WritePolicy.from_mapping(keys)
    assert (policy.bloom_filter(populate_meta_fields) is not None) is written


def test_the_filters_size_and_type_come_from_the_keys() -> None:
    policy = WritePolicy.from_mapping(
        {
            "hoodie.index.bloom.num_entries": "1000",
            "hoodie.index.bloom.fpp": "0.001",
            "hoodie.bloom.index.filter.type": "simple",
            "hoodie.bloom.index.filter.dynamic.max.entries": 5000,
        }
    )
    settings = policy.bloom_filter(populate_meta_fields=True)
    assert settings == BloomFilterSettings(1000, 0.001, BloomFilterTypeCode.SIMPLE, 5000)
    assert BloomFilterSettings.from_fields(settings.to_fields() if settings else None) == settings
    assert BloomFilterSettings.from_fields(None) is None


@pytest.mark.parametrize(
    ("given", "codec", "written"),
    [("SNAPPY", "snappy", "SNAPPY"), (" zstd", "zstd", "ZSTD"), ("uncompressed", "uncompressed", "UNCOMPRESSED")],
)
def test_codecs_are_normalised_and_written(given: str, codec: str, written: str, tmp_path: Path) -> None:
    """The key's value, normalised, is what the base file writer takes: the file's columns carry that codec."""
    policy = WritePolicy.from_mapping({"hoodie.parquet.compression.codec": given})
    assert policy.compression_codec == codec
    location = str(tmp_path / "f.parquet")
    schema = {"type": "record", "name": "r", "fields": [{"name": "_hoodie_record_key", "type": "string"}]}
    write_base_file(
        Storage(),
        location,
        pa.table({"_hoodie_record_key": ["a", "b"]}),
        avro_schema=schema,
        compression=policy.compression_codec,
    )
    assert pq.ParquetFile(location).metadata.row_group(0).column(0).compression == written


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"hoodie.parquet.compression.codec": "lzo"}, "LZO is not written"),
        ({"hoodie.parquet.compression.codec": "gz"}, "expected one of gzip, snappy"),
        ({"hoodie.index.bloom.fpp": 0}, "hoodie.index.bloom.fpp=0"),
        ({"hoodie.index.bloom.fpp": "1.5"}, "hoodie.index.bloom.fpp='1.5'"),
        ({"hoodie.index.bloom.num_entries": 0}, "hoodie.index.bloom.num_entries=0"),
        ({"hoodie.index.bloom.num_entries": "2.5"}, "expected a whole number"),
        ({"hoodie.bloom.index.filter.type": "DYNAMIC_V1"}, "expected DYNAMIC_V0 or SIMPLE"),
        ({"hoodie.parquet.bloom.filter.enabled": "maybe"}, "hoodie.parquet.bloom.filter.enabled='maybe'"),
        ({"hoodie.index.bloom.num_entries": 30_000_000}, "takes 1,293,982,881 bits, more than 1,073,741,824"),
    ],
)
def test_bad_values_are_refused_naming_the_key(keys: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match="invalid write policy") as caught:
        WritePolicy.from_mapping(keys)
    assert message in str(caught.value)


def test_a_misspelt_key_under_its_prefixes_is_refused_when_strict() -> None:
    with pytest.raises(ConfigError) as caught:
        WritePolicy.from_mapping({"hoodie.parquet.bloom.filter.enable": "false"}, strict=True)
    assert "unknown write setting hoodie.parquet.bloom.filter.enable=" in str(caught.value)
