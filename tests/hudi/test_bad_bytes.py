"""Bad bytes never escape the format layer as bare Python errors: every timeline file, hoodie.properties, log file
(its blocks and their records) and base file of the fixture tables and of generated v6 and v9 tables is read
truncated and with flipped bytes; each read either succeeds or raises a TableServiceError naming a file."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tableservice.errors import TableServiceError
from tableservice.hudi.file_group.base_file_reader import iter_base_file, read_base_file_footer
from tableservice.hudi.file_group.log_format import (
    BlockType,
    LogBlock,
    decode_data_block,
    decode_delete_block,
    iter_log_blocks,
)
from tableservice.hudi.models import decode_instant_content
from tableservice.hudi.table.config import parse_table_config
from tableservice.hudi.timeline.instant import parse_instant_file_name
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table
from tests.support.fixtures import fixture_names, fixture_table_readonly

DATA_BLOCKS = (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.CDC_DATA)


def _mutations(data: bytes) -> Iterator[tuple[str, bytes]]:
    n = len(data)
    for cut in sorted({1, n // 4, n // 2, n - 1}):
        if 0 < cut < n:
            yield f"truncated at {cut}", data[:cut]
    for pos in sorted({0, 9, n // 3, n // 2, (2 * n) // 3, n - 5, n - 1}):
        if 0 <= pos < n:
            yield f"byte {pos} flipped", data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1 :]


def _reader(path: Path, scratch: Path, storage: Storage) -> Callable[[bytes], object] | None:
    """How the daemon reads a file like `path`, given its bytes (None: not a kind of file read here)."""
    location = str(path)

    def via_file(read: Callable[[str], object]) -> Callable[[bytes], object]:
        def run(data: bytes) -> object:
            copy = scratch / path.name
            copy.write_bytes(data)
            return read(str(copy))

        return run

    def log_file(copy: str) -> None:
        for block in iter_log_blocks(storage, copy, table="t"):
            if isinstance(block, LogBlock) and block.block_type in DATA_BLOCKS:
                decode_data_block(block, storage, table="t")
            elif isinstance(block, LogBlock) and block.block_type is BlockType.DELETE:
                decode_delete_block(block, storage, table="t")

    def base_file(copy: str) -> None:
        read_base_file_footer(storage, copy)
        for _ in iter_base_file(storage, copy):
            pass

    if path.name == "hoodie.properties":
        return lambda data: parse_table_config(data, path=location)
    if ".log." in path.name:
        return via_file(log_file)
    if path.suffix == ".parquet":
        return via_file(base_file)
    instant = parse_instant_file_name(path.name)
    if instant is None:
        return None
    return lambda data: decode_instant_content(data, action=instant.action.value, state=instant.state, path=location)


def test_damaged_files_raise_typed_errors_naming_a_file(tmp_path: Path) -> None:
    names = fixture_names()
    if not names:
        pytest.fail("no fixture tables") if _in_ci() else pytest.skip("fixture tables are absent")
    roots = [fixture_table_readonly(n) for n in names]
    roots += [Path(mor_table(tmp_path / f"v{v}", version=v, records=60, commits=3)) for v in (6, 9)]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    storage = Storage()
    escaped: list[str] = []
    kinds: set[str] = set()
    reads = 0
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file() and p.stat().st_size > 0):
            read = _reader(path, scratch, storage)
            if read is None:
                continue
            kinds.add("log" if ".log." in path.name else path.suffix or path.name)
            for what, data in _mutations(path.read_bytes()):
                reads += 1
                try:
                    read(data)
                except TableServiceError as e:
                    if e.path is None:
                        escaped.append(f"{path} ({what}): {type(e).__name__} names no file: {e}")
                except Exception as e:
                    escaped.append(f"{path} ({what}): {type(e).__name__}: {e}")
    assert escaped == [], "\n".join(escaped[:10])
    assert {"log", ".parquet", ".properties", ".deltacommit", ".commit", ".requested"} <= kinds, kinds
    assert reads > 1000


def _in_ci() -> bool:
    import os

    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
