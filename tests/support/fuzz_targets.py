"""The parsers of untrusted bytes, each called through the entry point the daemon uses on bytes from disk, with
seeds of real bytes: the fixture tables (when present), small tables written by our write client (v6 and v9, with
metadata tables), and what our own encoders produce (archive logs, LSM history files and manifests).

`build_targets(workdir)` returns one `Target` per parser. `Target.parse(i, data)` runs the parser on `data` as a
mutation of seed `i` (the seed index picks the context a file has on disk: its instant's action and state, the
block header around a block's content) and returns what it decoded, as plain values. It either returns or raises
a TableServiceError; anything else is a bug.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from tableservice.config import load_config
from tableservice.hudi.file_group.log_format import (
    BlockType,
    LogBlock,
    decode_data_block,
    decode_delete_block,
    iter_log_blocks,
)
from tableservice.hudi.metadata.hfile import read_hfile
from tableservice.hudi.metadata.reader import _hfile_records
from tableservice.hudi.models import decode_instant_content
from tableservice.hudi.table.config import TableConfig, parse_table_config
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.archive import read_archive_sources
from tableservice.hudi.timeline.archive_lsm import (
    LsmFileEntry,
    LsmManifest,
    encode_lsm_file,
    lsm_row,
    parse_manifest,
    read_lsm_file,
)
from tableservice.hudi.timeline.archive_v1 import archive_entries, encode_archive_blocks, read_archive_log
from tableservice.hudi.timeline.instant import State, parse_instant_file_name
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table
from tests.support.fixtures import fixture_names, fixture_table_readonly

REPO = Path(__file__).resolve().parents[2]
STORAGE = Storage()
DATA_BLOCKS = (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.CDC_DATA)
#: Seeds larger than this are left out (fuzzing speed); every fixture file of interest is smaller.
MAX_SEED_BYTES = 64 * 1024


@dataclass
class Target:
    name: str
    seeds: list[bytes]
    parse: Callable[[int, bytes], object]
    #: Per seed, what `parse` needs besides the bytes (action/state, the block around the content...).
    context: list[Any] = field(default_factory=list)


# --- what a parse returns: plain values that compare by value ------------------------------------


def table_rows(table: pa.Table) -> pa.Table:
    """A decoded table, checked to be valid Arrow data (the Avro decoder builds arrays from raw buffers). Kept as
    Arrow, which compares by value: a valid date32 may lie past Python's year 9999, so no Python rows."""
    table.validate(full=True)
    return table


def read_log_file(location: str) -> list[tuple[Any, ...]]:
    """Every block of a log file as the file group reader sees it: corrupt regions, headers, decoded rows."""
    out: list[tuple[Any, ...]] = []
    for block in iter_log_blocks(STORAGE, location, table="fuzz"):
        if not isinstance(block, LogBlock):
            out.append(("corrupt", block.offset, block.length))
            continue
        decoded: Any = None
        if block.block_type in DATA_BLOCKS:
            decoded = table_rows(decode_data_block(block, STORAGE, table="fuzz"))
        elif block.block_type is BlockType.DELETE:
            decoded = table_rows(decode_delete_block(block, STORAGE, table="fuzz"))
        out.append((block.block_type, block.offset, block.size, dict(block.header), dict(block.footer), decoded))
    return out


def _via_file(scratch: Path, name: str, read: Callable[[str], object]) -> Callable[[int, bytes], object]:
    path = scratch / name

    def run(_: int, data: bytes) -> object:
        path.write_bytes(data)
        return read(str(path))

    return run


# --- seeds ---------------------------------------------------------------------------------------


@dataclass
class _Files:
    logs: list[Path] = field(default_factory=list)
    timeline: list[Path] = field(default_factory=list)
    properties: list[Path] = field(default_factory=list)
    hfiles: list[Path] = field(default_factory=list)
    tables: list[Path] = field(default_factory=list)


def _collect(root: Path, files: _Files) -> None:
    files.tables.append(root)
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.stat().st_size > MAX_SEED_BYTES:
            continue
        if ".log." in p.name:
            files.logs.append(p)
        elif p.suffix == ".hfile":
            files.hfiles.append(p)
        elif p.name == "hoodie.properties":
            files.properties.append(p)
        elif p.parent.name in (".hoodie", "timeline") and parse_instant_file_name(p.name) is not None:
            files.timeline.append(p)
    meta = root / ".hoodie" / "metadata"
    if (meta / ".hoodie").is_dir():
        files.tables.append(meta)


def _distinct(paths: Iterable[Path], limit: int) -> list[bytes]:
    """Up to `limit` distinct contents, spread over the list (small files first within equal names)."""
    seen: dict[bytes, None] = {}
    items = list(paths)
    step = max(1, len(items) // limit)
    for p in items[::step] + items:
        if len(seen) >= limit:
            break
        seen.setdefault(p.read_bytes(), None)
    return list(seen)


def _generated_tables(workdir: Path) -> list[Path]:
    out = []
    for version in (6, 9):
        path = workdir / f"generated_v{version}"
        marker = path / ".fuzz-complete"
        if not marker.exists():
            mor_table(path, version=version, records=40, commits=3, max_file_records=20, name=f"fuzz_v{version}")
            marker.touch()
        out.append(path)
    return out


def _archive_seeds(tables: Iterable[Path]) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """(v6 archive logs, LSM history files, LSM manifests) archiving every completed instant of each table."""
    logs: list[bytes] = []
    lsm: list[bytes] = []
    manifests: list[bytes] = []
    for root in tables:
        table = HudiTable.open(STORAGE, str(root))
        done = list(table.timeline().completed())[:12]
        if not done:
            continue
        sources = read_archive_sources(STORAGE, str(root), table.config, done)
        if table.config.layout_version == 1:
            entries = archive_entries(sources, base_path=str(root), config=table.config)
            logs.append(b"".join(encode_archive_blocks(entries, batch_size=4)))
        else:
            data = encode_lsm_file([lsm_row(s) for s in sources])
            lsm.append(data)
            names = [f"{s.instant.requested_time}_{s.instant.requested_time}_0.parquet" for s in sources[:3]]
            manifests.append(LsmManifest(tuple(LsmFileEntry(n, len(data)) for n in names)).to_json().encode())
    return logs, lsm, manifests


# --- targets -------------------------------------------------------------------------------------


def _log_file_target(scratch: Path, files: _Files) -> Target:
    seeds = _distinct(files.logs, 24)
    return Target("log_file", seeds, _via_file(scratch, ".f_1.log.1_0-0-0", read_log_file))


def _block_targets(files: _Files) -> list[Target]:
    """Block content fuzzed inside intact framing: the block decoders on their own."""
    by_kind: dict[str, list[LogBlock]] = {"avro_block": [], "parquet_block": [], "delete_block": []}
    kinds = {
        BlockType.AVRO_DATA: "avro_block",
        BlockType.PARQUET_DATA: "parquet_block",
        BlockType.DELETE: "delete_block",
    }
    for path in files.logs:
        for block in iter_log_blocks(STORAGE, str(path)):
            if isinstance(block, LogBlock) and block.block_type in kinds and block.content:
                by_kind[kinds[block.block_type]].append(block)
    out = []
    for name, blocks in by_kind.items():
        unique = list({b.content: b for b in blocks}.values())[:12]

        def parse(i: int, data: bytes, _blocks: list[LogBlock] = unique) -> object:
            block = dataclasses.replace(_blocks[i], content=data, content_length=len(data))
            if block.block_type is BlockType.DELETE:
                return table_rows(decode_delete_block(block, table="fuzz"))
            return table_rows(decode_data_block(block, table="fuzz"))

        out.append(Target(name, [b.content or b"" for b in unique], parse, list(unique)))
    return out


def _timeline_target(files: _Files) -> Target:
    """Up to four distinct files of every (action, state) the tables have."""
    by_kind: dict[tuple[str, State], list[tuple[bytes, str]]] = {}
    for p in files.timeline:
        inst = parse_instant_file_name(p.name)
        assert inst is not None
        by_kind.setdefault((inst.action.value, inst.state), []).append((p.read_bytes(), str(p)))
    chosen: dict[bytes, tuple[str, State, str]] = {}
    for turn in range(4):
        for (action, state), items in by_kind.items():
            if turn < len(items):
                chosen.setdefault(items[turn][0], (action, state, items[turn][1]))
    seeds = list(chosen)
    context = [chosen[s] for s in seeds]

    def parse(i: int, data: bytes) -> object:
        action, state, path = context[i]
        content = decode_instant_content(data, action=action, state=state, path=path)
        return None if content is None else content.to_avro()

    return Target("timeline", seeds, parse, context)


def _archive_log_target(scratch: Path, seeds: list[bytes]) -> Target:
    def read(location: str) -> object:
        out = []
        for inst in read_archive_log(STORAGE, location, table="fuzz"):
            meta = inst.decode_metadata()
            plan = inst.decode_plan()
            out.append(
                (inst.to_instant(), None if meta is None else meta.to_avro(), None if plan is None else plan.to_avro())
            )
        return out

    return Target("archive_log", seeds, _via_file(scratch, ".commits_.archive.1_1-0-1", read))


def _lsm_target(scratch: Path, seeds: list[bytes]) -> Target:
    def read(location: str) -> object:
        out = []
        for inst in read_lsm_file(STORAGE, location):
            meta = inst.decode_metadata()
            plan = inst.decode_plan()
            out.append(
                (inst.to_instant(), None if meta is None else meta.to_avro(), None if plan is None else plan.to_avro())
            )
        return out

    return Target("lsm_history", seeds, _via_file(scratch, "1_2_0.parquet", read))


def _manifest_target(seeds: list[bytes]) -> Target:
    return Target("lsm_manifest", seeds, lambda _, data: parse_manifest(data, path="manifest_1"))


def _properties_target(files: _Files) -> Target:
    def parse(_: int, data: bytes) -> object:
        config: TableConfig = parse_table_config(data, path="hoodie.properties")
        return dict(config.properties)

    return Target("hoodie_properties", _distinct(files.properties, 12), parse)


def _config_target(scratch: Path) -> Target:
    seeds = [(REPO / "config.example.yaml").read_bytes()]
    seeds.append(
        b"service:\n  poll_interval_seconds: 5\n  http: {host: 127.0.0.1, port: 0}\n"
        b"tables:\n  - uri: /data/trips\n    name: trips\n    policy:\n      compaction:\n"
        b"        hoodie.compact.inline.max.delta.commits: 3\n"
        b"defaults:\n  clean:\n    hoodie.cleaner.commits.retained: 4\n"
        b"locks:\n  hoodie.write.lock.provider: zookeeper\n  hoodie.write.lock.zookeeper.url: localhost\n"
        b"  hoodie.write.lock.zookeeper.port: 2181\n  hoodie.write.lock.zookeeper.base_path: /hudi/locks\n"
        b"  hoodie.write.lock.zookeeper.lock_key: trips\n"
    )

    def read(location: str) -> object:
        return load_config(location, env={}).model_dump()

    return Target("daemon_config", seeds, _via_file(scratch, "daemon.yaml", read))


def _hfile_target(files: _Files) -> Target:
    def parse(_: int, data: bytes) -> object:
        hfile = read_hfile(data, path="f.hfile")
        return (hfile.file_info, hfile.meta_blocks, list(_hfile_records(data, "f.hfile")))

    return Target("hfile", _distinct(files.hfiles, 10), parse)


def build_targets(workdir: Path, *, use_fixtures: bool = True) -> list[Target]:
    """Every parser with its seeds; `workdir` keeps the generated tables (reused between runs) and a scratch folder
    of this process's own (two runs sharing one would change each other's files while they are read)."""
    workdir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="scratch-", dir=workdir))
    files = _Files()
    for root in _generated_tables(workdir):
        _collect(root, files)
    if use_fixtures:
        for name in fixture_names():
            _collect(fixture_table_readonly(name), files)
    logs, lsm, manifests = _archive_seeds(files.tables)
    return [
        _log_file_target(scratch, files),
        *_block_targets(files),
        _timeline_target(files),
        _archive_log_target(scratch, logs),
        _lsm_target(scratch, lsm),
        _manifest_target(manifests),
        _properties_target(files),
        _config_target(scratch),
        _hfile_target(files),
    ]


def iter_seed_cases(target: Target) -> Iterator[tuple[int, bytes]]:
    yield from enumerate(target.seeds)
