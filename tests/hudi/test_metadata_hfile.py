"""HFile: every HFile of the real metadata tables decodes and re-encodes byte for byte; damage is a typed error."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tableservice.errors import CorruptFileError
from tableservice.hudi.file_group.log_format import BlockType
from tableservice.hudi.file_group.log_format.reader import iter_log_blocks, read_block_content
from tableservice.hudi.metadata.hfile import HFile, read_hfile
from tableservice.hudi.metadata.hfile_write import write_hfile
from tableservice.storage import Storage
from tests.support.fixtures import fixture_table_readonly, metadata_fixture_names

NAMES = metadata_fixture_names()


def _hfiles(table: Path) -> list[tuple[str, bytes]]:
    """(name, bytes) of every base HFile and every HFile log block of the table's metadata table."""
    storage = Storage()
    out = []
    for path in sorted((table / ".hoodie" / "metadata").rglob("*")):
        if ".hoodie/metadata/.hoodie" in str(path) or not path.is_file():
            continue
        if path.name.endswith(".hfile"):
            out.append((path.name, path.read_bytes()))
        elif ".log." in path.name:
            for block in iter_log_blocks(storage, str(path)):
                if getattr(block, "block_type", None) is BlockType.HFILE_DATA:
                    out.append((f"{path.name}@{block.offset}", read_block_content(block, storage)))  # type: ignore[arg-type]
    return out


def _reencode(h: HFile, **options: int) -> bytes:
    create = struct.unpack(">q", h.file_info.get(b"hfile.CREATE_TIME_TS", bytes(8)))[0]
    return write_hfile(
        h.cells,
        file_info=list(h.file_info.items()),
        meta_blocks=h.meta_blocks,
        layout=h.layout,
        create_time_ms=create,
        **options,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("name", NAMES or ["none"])
def test_fixture_hfiles_reencode_byte_for_byte(name: str) -> None:
    if name == "none":
        pytest.skip("no fixtures with a metadata table")
    files = _hfiles(fixture_table_readonly(name))
    assert files
    for file_name, data in files:
        h = read_hfile(data, path=file_name)
        assert h.layout == ("hudi" if "/v9_" in name else "hbase"), file_name
        assert _reencode(h) == data, file_name


def _v8_base_hfile() -> tuple[str, bytes]:
    if "quickstart_trips_table/mor/avro/v8_trips_8i3u1d" not in NAMES:
        pytest.skip("the v8 fixture with a metadata table is absent")
    table = fixture_table_readonly("quickstart_trips_table/mor/avro/v8_trips_8i3u1d")
    path = sorted((table / ".hoodie" / "metadata" / "files").glob("*.hfile"))[-1]
    return str(path), path.read_bytes()


def test_checksum_mismatch_names_the_file() -> None:
    path, data = _v8_base_hfile()
    assert read_hfile(data, path=path).cells
    damaged = bytearray(data)
    damaged[40] ^= 0x01  # inside the first data block's compressed payload
    with pytest.raises(CorruptFileError, match="checksum mismatch") as e:
        read_hfile(bytes(damaged), path=path)
    assert path in str(e.value)


@pytest.mark.parametrize("cut", [100, 4000])
def test_truncated_file_is_corrupt(cut: int) -> None:
    path, data = _v8_base_hfile()
    with pytest.raises(CorruptFileError):
        read_hfile(data[:-cut], path=path)


def test_unchecksummed_damage_is_caught_by_gzip() -> None:
    cells = [(f"key-{i:04d}".encode(), bytes([i % 251]) * 20) for i in range(50)]
    data = bytearray(write_hfile(cells, layout="hudi"))
    data[60] ^= 0xFF
    with pytest.raises(CorruptFileError):
        read_hfile(bytes(data), path="x.hfile")


@pytest.mark.parametrize("layout", ["hbase", "hudi"])
def test_many_blocks_round_trip(layout: str) -> None:
    cells = [(f"row-{i:06d}".encode(), f"value {i}".encode() * (i % 7 + 1)) for i in range(3000)]
    data = write_hfile(
        cells,
        file_info=[(b"schema", b'{"type":"record"}')],
        meta_blocks={b"bloomFilter": b"x" * 10},
        layout=layout,
        block_size=2048,
    )
    h = read_hfile(data, path="many.hfile")
    assert h.cells == cells
    assert len(h.data_blocks) == len(h.data_index) > 10
    assert [e.offset for e in h.data_index] == [
        sum(b.total_size for b in h.data_blocks[:i]) for i in range(len(h.data_blocks))
    ]
    assert h.meta_blocks == {b"bloomFilter": b"x" * 10}
    assert h.file_info[b"schema"] == b'{"type":"record"}'
    assert h.layout == layout
    # the same input gives the same bytes
    assert _reencode(h, block_size=2048) == data


def test_empty_file_round_trips() -> None:
    for layout in ("hbase", "hudi"):
        h = read_hfile(write_hfile([], layout=layout), path="empty.hfile")
        assert h.cells == [] and h.data_blocks == [] and h.layout == layout


def test_writer_refuses_unsorted_or_repeated_rows() -> None:
    with pytest.raises(ValueError, match="sorted"):
        write_hfile([(b"b", b""), (b"a", b"")])
    with pytest.raises(ValueError, match="sorted"):
        write_hfile([(b"a", b""), (b"a", b"")])
