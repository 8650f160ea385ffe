"""One test per problem the fuzzing and the review of the parsers found: each input used to raise a bare Python
error, loop without end or allocate without bound; now it raises a typed error naming the file (or decodes)."""

from __future__ import annotations

import gzip
import io
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tableservice.errors import CorruptFileError, InvalidPlanError, InvalidTableConfigError, StorageError
from tableservice.hudi.file_group.log_format import (
    BlockType,
    LogBlock,
    decode_data_block,
    encode_command_block,
    iter_log_blocks,
    rollback_header,
)
from tableservice.hudi.file_group.log_format.avro_decode import decode_avro_records
from tableservice.hudi.metadata.hfile import HFileFormatError, read_block
from tableservice.hudi.models import decode_commit_metadata, decode_compaction_plan
from tableservice.hudi.table.config import parse_table_config
from tableservice.hudi.table.schema import parse_avro
from tableservice.hudi.table.schema_guard import zero_width_array
from tableservice.hudi.timeline.archive_lsm import parse_manifest
from tableservice.storage import Storage
from tests.support.fuzz_mutators import zigzag_varint

HUGE_COUNT = zigzag_varint(2**62)


def _container_with_huge_null_array() -> bytes:
    schema = {
        "type": "record",
        "name": "HoodieCompactionPlan",
        "namespace": "org.apache.hudi.avro.model",
        "fields": [{"name": "a", "type": {"type": "array", "items": "null"}}],
    }
    buf = io.BytesIO()
    fastavro.writer(buf, schema, [{"a": [None]}], sync_marker=b"S" * 16)
    data = buf.getvalue()
    head = data[: data.index(b"S" * 16) + 16]
    body = HUGE_COUNT + b"\x00"
    return head + zigzag_varint(1) + zigzag_varint(len(body)) + body + b"S" * 16


def test_an_array_of_nulls_with_a_huge_count_is_refused_not_looped_over() -> None:
    with pytest.raises(InvalidPlanError) as e:
        decode_compaction_plan(_container_with_huge_null_array(), path="t/.hoodie/1.compaction.requested")
    assert e.value.problem == "Avro container's writer schema has an array a of items that take no bytes"
    assert e.value.path == "t/.hoodie/1.compaction.requested"


@pytest.mark.parametrize(
    ("schema", "found"),
    [
        ({"type": "array", "items": "null"}, "array (top level) of items that take no bytes"),
        (
            {
                "type": "record",
                "name": "r",
                "fields": [
                    {
                        "name": "x",
                        "type": {
                            "type": "array",
                            "items": {"type": "record", "name": "e", "fields": [{"name": "n", "type": "null"}]},
                        },
                    }
                ],
            },
            "array x of items that take no bytes",
        ),
        (
            {"type": "array", "items": {"type": "fixed", "name": "z", "size": 0}},
            "array (top level) of items that take no bytes",
        ),
        ({"type": "array", "items": ["null", "int"]}, None),
        ({"type": "array", "items": "int"}, None),
        ({"type": "record", "name": "node", "fields": [{"name": "next", "type": ["null", "node"]}]}, None),
        ({"type": "record", "name": "r", "fields": [{"name": "xs", "type": {"type": "array", "items": "r"}}]}, None),
    ],
)
def test_zero_width_arrays_are_found(schema: Any, found: str | None) -> None:
    assert zero_width_array(schema) == found


def test_deeply_nested_json_is_a_typed_error() -> None:
    with pytest.raises(InvalidPlanError) as e:
        decode_commit_metadata(b"[" * 100_000, path="t/.hoodie/1.commit")
    assert (e.value.problem, e.value.path) == ("commit metadata JSON is nested too deeply", "t/.hoodie/1.commit")
    with pytest.raises(CorruptFileError) as m:
        parse_manifest(b'{"files":' * 100_000, path="h/manifest_1")
    assert (m.value.problem, m.value.path) == ("LSM manifest JSON is nested too deeply", "h/manifest_1")


def test_a_lone_surrogate_escape_in_hoodie_properties_is_a_typed_error() -> None:
    base = b"hoodie.table.name=t\nhoodie.table.type=COPY_ON_WRITE\nhoodie.table.version=6\n"
    assert parse_table_config(base + b"x=\\uD83D\\uDE00\n", path="p").properties["x"] == "\U0001f600"
    with pytest.raises(InvalidTableConfigError) as e:
        parse_table_config(base + b"x=\\uD800\n", path="t/.hoodie/hoodie.properties")
    assert e.value.path == "t/.hoodie/hoodie.properties"
    assert "escape does not decode" in e.value.problem


def _hfile_block(payload: bytes, uncompressed: int, *, checksum_type: int = 0, per_checksum: int = 0) -> bytes:
    header = b"DATABLK*" + struct.pack(
        ">iiqbii", len(payload), uncompressed, -1, checksum_type, per_checksum, 33 + len(payload)
    )
    return header + payload


def test_an_hfile_block_inflates_only_to_its_stated_size() -> None:
    bomb = gzip.compress(b"\0" * (16 << 20))  # 16 MiB from about 16 KiB
    with pytest.raises(HFileFormatError, match="inflates past its uncompressed size 100"):
        read_block(_hfile_block(bomb, 100), 0, 1)
    payload = b"cells" * 20
    header, got = read_block(_hfile_block(gzip.compress(payload), len(payload)), 0, 1)
    assert (got, header.uncompressed_size) == (payload, len(payload))


def test_an_hfile_block_with_too_few_checksum_bytes_fails_before_computing_them() -> None:
    block = _hfile_block(b"x" * 64, 64, checksum_type=2, per_checksum=1)  # would need 97 checksums, has none
    with pytest.raises(HFileFormatError, match="0 checksum bytes, expected 388"):
        read_block(block, 0, 2)


def _avro_content(record: bytes) -> bytes:
    return struct.pack(">iii", 3, 1, len(record)) + record


def test_an_avro_string_length_near_2_pow_63_is_corrupt_not_an_overflow() -> None:
    schema = parse_avro({"type": "record", "name": "r", "fields": [{"name": "s", "type": "string"}]})
    with pytest.raises(CorruptFileError, match="string or bytes length runs past its record"):
        decode_avro_records(_avro_content(zigzag_varint(2**63 - 1) + b"abc"), schema)
    assert decode_avro_records(_avro_content(zigzag_varint(3) + b"abc"), schema).to_pylist() == [{"s": "abc"}]


def test_a_huge_fixed_that_no_record_holds_allocates_nothing() -> None:
    schema = parse_avro(
        {
            "type": "record",
            "name": "r",
            "fields": [
                {"name": "id", "type": "int"},
                {"name": "f", "type": ["null", {"type": "fixed", "name": "big", "size": 2**40}]},
            ],
        }
    )
    got = decode_avro_records(_avro_content(zigzag_varint(7) + zigzag_varint(0)), schema)
    assert got.to_pylist() == [{"id": 7, "f": None}]
    with pytest.raises(CorruptFileError, match="longer than the block"):
        decode_avro_records(_avro_content(zigzag_varint(7) + zigzag_varint(1) + b"x"), schema)


def _parquet_block(content: bytes) -> LogBlock:
    return LogBlock(BlockType.PARQUET_DATA, {}, {}, "t/p/.f_1.log.1_0-0-0", 0, 0, 0, len(content), content)


def _parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none", store_schema=False)
    return sink.getvalue()


def test_parquet_blocks_with_names_or_strings_that_are_not_utf8_are_corrupt() -> None:
    data = _parquet(pa.table({"zzqq": ["hello", "world"]}))
    assert decode_data_block(_parquet_block(data)).to_pylist() == [{"zzqq": "hello"}, {"zzqq": "world"}]
    for damaged in (data.replace(b"zzqq", b"\x9czqq"), data.replace(b"hello", b"\xffello")):
        with pytest.raises(CorruptFileError, match="does not decode") as e:
            decode_data_block(_parquet_block(damaged))
        assert e.value.path == "t/p/.f_1.log.1_0-0-0"


def test_a_log_file_that_shrinks_while_scanned_is_a_storage_error_not_an_endless_scan(tmp_path: Path) -> None:
    path = tmp_path / ".f_1.log.1_0-0-0"
    first = encode_command_block(rollback_header("20250101000000001", "20250101000000000"))
    path.write_bytes(first + first + b"\0" * (2 << 20) + first)  # the second block runs into junk
    blocks = iter_log_blocks(Storage(), str(path))
    block = next(blocks)
    assert isinstance(block, LogBlock) and block.is_rollback_command
    with path.open("r+b") as f:
        f.truncate(3 << 19)  # 1.5 MiB: below the size taken at open, past the first read-ahead window
    with pytest.raises(StorageError, match="file shrank while read") as e:
        next(blocks)
    assert e.value.path == str(path)


def test_an_avro_decimal_with_more_digits_than_its_precision_is_corrupt() -> None:
    field = {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}
    schema = parse_avro({"type": "record", "name": "r", "fields": [{"name": "d", "type": field}]})
    ok = decode_avro_records(_avro_content(zigzag_varint(2) + (1234).to_bytes(2, "big")), schema)
    assert ok.to_pylist() == [{"d": Decimal("12.34")}]
    with pytest.raises(CorruptFileError, match="decimal value does not fit its precision"):
        decode_avro_records(_avro_content(zigzag_varint(3) + (123456).to_bytes(3, "big")), schema)
