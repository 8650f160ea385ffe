"""The archived timeline: v6 archive log and v8/v9 LSM history, written by us, read back, checked against the
instant files they came from, the log reader, pyarrow, crash cases and hudi-rs."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import fastavro
import pyarrow.parquet as pq
import pytest

from tableservice.errors import CorruptFileError, InvalidPlanError
from tableservice.hudi.file_group.log_format import BlockType, HeaderKey, LogBlock, decode_data_block, iter_log_blocks
from tableservice.hudi.models import (
    HoodieCommitMetadata,
    Kind,
    decode_commit_metadata,
    decode_instant_content,
    schema_to_json,
    writer_schema,
)
from tableservice.hudi.models.avro_io import parsed_schema, write_avro_container
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline import archive_lsm
from tableservice.hudi.timeline.archive import (
    ArchiveSource,
    archive_instants,
    archived_completion_times,
    compact_lsm,
    load_archived_instants,
    read_archive_sources,
)
from tableservice.hudi.timeline.archive_lsm import (
    ARROW_SCHEMA,
    encode_lsm_file,
    latest_manifest,
    lsm_row,
    parse_lsm_file_name,
)
from tableservice.hudi.timeline.archive_v1 import archive_instants_v6
from tableservice.hudi.timeline.instant import INSTANT_FORMAT, Action, Instant, State, timeline_timezone
from tableservice.storage import Storage
from tests.support.fixtures import fixture_names, fixture_table
from tests.support.oracle import hudi_read, hudi_slices

V6 = "sample_table/cow/v6_nonpartitioned"
V6_MOR_ROLLBACK = "sample_table/mor/parquet/v6_nonpartitioned_rollback"
V9 = "sample_table/cow/v9_txns_complex_nometa"
ST = Storage()


def _table(name: str, tmp_path: Path) -> tuple[str, HudiTable]:
    path = str(fixture_table(name, tmp_path))
    return path, HudiTable.open(ST, path)


def _archive_all(path: str, table: HudiTable, count: int | None = None) -> list[Instant]:
    done = list(table.timeline().completed())[:count]
    archive_instants(ST, path, table.config, read_archive_sources(ST, path, table.config, done))
    return done


def _mtime_instant(path: str, tz_name: str) -> str:
    tz = timeline_timezone(tz_name)
    ms = os.stat(path).st_mtime_ns // 1_000_000
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone(tz)
    return moment.strftime(INSTANT_FORMAT) + f"{ms % 1000:03d}"


# --- v6 archive log --------------------------------------------------------------------------------


def test_v6_archive_round_trip(tmp_path: Path) -> None:
    path, table = _table(V6, tmp_path)
    done = _archive_all(path, table)
    assert [i.requested_time for i in done] == ["20240418173550988", "20240418173551906"]
    archived = tuple(sorted(os.listdir(Path(path, ".hoodie/archived"))))
    assert archived == (".commits_.archive.1_1-0-1",)
    got = load_archived_instants(ST, path, table.config)
    # one entry per timeline file: requested, inflight, completed
    assert [(a.requested_time, a.action, a.state) for a in got] == [
        (i.requested_time, Action.COMMIT, s) for i in done for s in (State.REQUESTED, State.INFLIGHT, State.COMPLETED)
    ]
    for a in got:
        active_file = Path(path, ".hoodie", a.to_instant().file_name(1))
        assert a.state_transition_time == _mtime_instant(str(active_file), table.config.timezone_name)
        assert a.completion_time == (a.state_transition_time if a.is_completed else None)
        md = a.decode_metadata()
        if a.state is State.REQUESTED:
            assert md is None  # empty `.commit.requested`
            continue
        original = decode_commit_metadata(active_file.read_bytes(), path=str(active_file))
        assert isinstance(md, HoodieCommitMetadata)
        assert md.partition_to_write_stats == original.partition_to_write_stats
        assert md.operation_type == original.operation_type
        extra = dict(md.extra_metadata or {})
        assert extra.pop("ROLLING_STAT") == ""  # blanked as Hudi archives it
        assert extra == dict(original.extra_metadata or {})
        assert a.archived_meta_entry().version is None
    completed = {a.requested_time: a.completion_time for a in got if a.is_completed}
    assert archived_completion_times(ST, path, table.config) == completed
    assert load_archived_instants(ST, path, table.config, completed_only=True, start="20240418173551000") == [
        a for a in got if a.is_completed and a.requested_time == "20240418173551906"
    ]


def test_v6_archive_blocks_decode_with_log_reader_and_validate(tmp_path: Path) -> None:
    path, table = _table(V6_MOR_ROLLBACK, tmp_path)
    sources = read_archive_sources(ST, path, table.config, table.timeline().completed())
    files = archive_instants_v6(ST, path, table.config, sources, batch_size=4)
    assert [Path(f).name for f in files] == [".commits_.archive.1_1-0-1"]
    schema = writer_schema(Kind.ARCHIVED_META_ENTRY, 6)
    parsed = parsed_schema(schema)
    blocks = list(iter_log_blocks(ST, files[0]))
    assert all(isinstance(b, LogBlock) for b in blocks)
    counts, times = [], []
    for b in blocks:
        assert isinstance(b, LogBlock)
        assert b.block_type == BlockType.AVRO_DATA
        assert set(b.header) == {HeaderKey.SCHEMA}
        assert b.header[HeaderKey.SCHEMA] == schema_to_json(schema)
        rows = decode_data_block(b)
        counts.append(rows.num_rows)
        times.extend(rows.column("commitTime").to_pylist())
        assert set(rows.column("actionState").to_pylist()) <= {"REQUESTED", "INFLIGHT", "COMPLETED"}
    assert counts == [4, 4, 1]  # 3 instants x 3 files, 4 entries a block
    expected = [a.requested_time for a in load_archived_instants(ST, path, table.config)]
    assert sorted(times) == expected
    for a in load_archived_instants(ST, path, table.config):
        assert a.entry is not None
        assert fastavro.validation.validate(dict(a.entry), parsed, raise_errors=True)
    rollback = [a for a in load_archived_instants(ST, path, table.config) if a.action is Action.ROLLBACK]
    assert [a.state for a in rollback] == [State.REQUESTED, State.INFLIGHT, State.COMPLETED]
    done = rollback[-1]
    active_file = Path(path, ".hoodie", done.to_instant().file_name(1))
    assert done.decode_metadata() == decode_instant_content(
        active_file.read_bytes(), action="rollback", state="completed", path=str(active_file)
    )
    # a second archival rolls over to the next version instead of appending
    again = archive_instants_v6(ST, path, table.config, sources[:1])
    assert [Path(f).name for f in again] == [".commits_.archive.2_1-0-1"]
    assert len(load_archived_instants(ST, path, table.config)) == 9  # duplicates of a retried archival kept once


def test_v6_replace_commit_entries(tmp_path: Path) -> None:
    path, table = _table("sample_table/cow/v6_simplekeygen_nonhivestyle_overwritetable", tmp_path)
    _archive_all(path, table)
    replace = [a for a in load_archived_instants(ST, path, table.config) if a.action is Action.REPLACE_COMMIT]
    assert [a.state for a in replace] == [State.REQUESTED, State.INFLIGHT, State.COMPLETED]
    for a in replace:
        f = Path(path, ".hoodie", a.to_instant().file_name(1))
        original = decode_instant_content(f.read_bytes(), action="replacecommit", state=a.state, path=str(f))
        got = a.decode_metadata()
        assert (
            type(got).__name__
            == {
                State.REQUESTED: "HoodieRequestedReplaceMetadata",
                State.INFLIGHT: "HoodieCommitMetadata",
                State.COMPLETED: "HoodieReplaceCommitMetadata",
            }[a.state]
        )
        if a.state is State.REQUESTED:
            assert got == original
            assert a.decode_plan() == original
        else:
            assert isinstance(got, HoodieCommitMetadata) and isinstance(original, HoodieCommitMetadata)
            assert got.partition_to_write_stats == original.partition_to_write_stats


def test_corrupt_v6_record_names_the_file(tmp_path: Path) -> None:
    path, table = _table(V6, tmp_path)
    _archive_all(path, table)
    log_file = Path(path, ".hoodie/archived/.commits_.archive.1_1-0-1")
    data = bytearray(log_file.read_bytes())
    block = next(b for b in iter_log_blocks(ST, str(log_file)) if isinstance(b, LogBlock))
    start = block.content_offset + 12  # first record's datum
    data[start : start + 40] = b"\xff" * 40  # framing intact, record bytes garbage
    log_file.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError) as err:
        load_archived_instants(ST, path, table.config)
    assert err.value.path == str(log_file)
    # ...unless an unfinished merge of small archive files was writing it (Hudi ignores that file)
    plan_schema = {
        "type": "record",
        "name": "HoodieMergeArchiveFilePlan",
        "namespace": "org.apache.hudi.avro.model",
        "fields": [
            {"name": "version", "type": ["int", "null"], "default": 1},
            {"name": "candidate", "type": ["null", {"type": "array", "items": "string"}], "default": None},
            {"name": "mergedArchiveFileName", "type": ["null", "string"], "default": None},
        ],
    }
    plan = {"version": 1, "candidate": [], "mergedArchiveFileName": log_file.name}
    Path(path, ".hoodie/archived/mergeArchivePlan").write_bytes(write_avro_container([plan], plan_schema))
    assert load_archived_instants(ST, path, table.config) == []


# --- v8/v9 LSM history -----------------------------------------------------------------------------


def test_lsm_round_trip(tmp_path: Path) -> None:
    path, table = _table(V9, tmp_path)
    done = _archive_all(path, table)
    got = load_archived_instants(ST, path, table.config)
    assert [(a.requested_time, a.action, a.state, a.completion_time) for a in got] == [
        (i.requested_time, i.completed_action(2), State.COMPLETED, i.completion_time) for i in done
    ]
    assert archived_completion_times(ST, path, table.config) == {i.requested_time: i.completion_time for i in done}
    for a, i in zip(got, done, strict=True):
        completed_file = Path(table.active.path_of(i))
        assert a.metadata == completed_file.read_bytes()
        assert a.decode_metadata() == decode_instant_content(
            completed_file.read_bytes(), action=i.completed_action(2).value, state="completed", path="x"
        )
        requested = Path(table.active.path_of(i.with_state(State.REQUESTED)))
        inflight = Path(table.active.path_of(i.with_state(State.INFLIGHT)))
        if i.action is Action.CLUSTERING:
            assert a.plan == requested.read_bytes()  # clustering inflight is empty
            assert type(a.decode_plan()).__name__ == "HoodieRequestedReplaceMetadata"
        elif i.action is Action.REPLACE_COMMIT:
            assert a.plan == inflight.read_bytes()  # a non-empty inflight replaces the requested plan
            assert type(a.decode_plan()).__name__ == "HoodieCommitMetadata"
        else:
            assert a.plan is None
    replace = [a for a in got if a.action is Action.REPLACE_COMMIT]
    assert all(type(a.decode_metadata()).__name__ == "HoodieReplaceCommitMetadata" for a in replace)
    assert [
        a.requested_time
        for a in load_archived_instants(
            ST, path, table.config, start=done[3].requested_time, end=done[5].requested_time
        )
    ] == [i.requested_time for i in done[3:6]]


def test_lsm_files_layout_and_parquet_schema(tmp_path: Path) -> None:
    path, table = _table(V9, tmp_path)
    done = _archive_all(path, table)
    history = Path(path, ".hoodie/timeline/history")
    name = f"{done[0].requested_time}_{done[-1].requested_time}_0.parquet"
    assert sorted(os.listdir(history)) == sorted([name, "_version_", "manifest_1"])
    assert (history / "_version_").read_text() == "1"
    size = (history / name).stat().st_size
    assert (history / "manifest_1").read_text() == (
        '{\n  "files" : [ {\n    "fileName" : "' + name + '",\n    "fileLen" : ' + str(size) + "\n  } ]\n}"
    )
    pf = pq.ParquetFile(history / name)
    schema = pf.schema_arrow
    assert schema.names == ["instantTime", "completionTime", "action", "metadata", "plan", "version"]
    assert [str(t) for t in schema.types] == ["string", "string", "string", "binary", "binary", "int32"]
    assert not schema.field("version").nullable and schema.field("instantTime").nullable
    meta = pf.metadata.metadata
    assert json.loads(meta[b"parquet.avro.schema"]) == writer_schema(Kind.LSM_TIMELINE_INSTANT, 9)
    assert meta[b"writer.model.name"] == b"avro"
    assert pf.metadata.row_group(0).column(0).compression == "GZIP"
    rows = pf.read().to_pylist()
    assert [r["instantTime"] for r in rows] == [i.requested_time for i in done]
    assert {r["version"] for r in rows} == {1}


def test_lsm_crash_between_data_file_and_manifest_keeps_previous_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, table = _table(V9, tmp_path)
    done = list(table.timeline().completed())
    sources = read_archive_sources(ST, path, table.config, done)
    archive_instants(ST, path, table.config, sources[:3])
    before = load_archived_instants(ST, path, table.config)
    history = Path(path, ".hoodie/timeline/history")

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(archive_lsm, "_create_manifest", crash)
    with pytest.raises(RuntimeError):
        archive_instants(ST, path, table.config, sources[3:6])
    leftover = f"{done[3].requested_time}_{done[5].requested_time}_0.parquet"
    assert (history / leftover).exists()
    assert load_archived_instants(ST, path, table.config) == before
    monkeypatch.undo()
    # a retry replaces the leftover and commits the file
    assert archive_instants(ST, path, table.config, sources[3:6])
    assert (history / "_version_").read_text() == "2"
    six = load_archived_instants(ST, path, table.config)
    assert [a.requested_time for a in six] == [i.requested_time for i in done[:6]]
    assert archive_instants(ST, path, table.config, sources[3:6]) == []  # already committed: skipped
    # crash after `manifest_3`, before `_version_` changes: readers stay on snapshot 2
    monkeypatch.setattr(archive_lsm, "_write_version", crash)
    with pytest.raises(RuntimeError):
        archive_instants(ST, path, table.config, sources[6:9])
    monkeypatch.undo()
    assert (history / "manifest_3").exists() and (history / "_version_").read_text() == "2"
    assert load_archived_instants(ST, path, table.config) == six
    # crash after `_version_` was deleted, before it was rewritten: readers take the highest manifest
    (history / "_version_").unlink()
    assert len(load_archived_instants(ST, path, table.config)) == 9
    assert archive_instants(ST, path, table.config, sources[6:9]) == []  # committed by manifest_3
    archive_instants(ST, path, table.config, sources[9:])
    assert (history / "_version_").read_text() == "4"
    assert [a.requested_time for a in load_archived_instants(ST, path, table.config)] == [
        i.requested_time for i in done
    ]


def test_corrupt_lsm_files_raise_typed_errors_naming_the_file(tmp_path: Path) -> None:
    path, table = _table(V9, tmp_path)
    _archive_all(path, table, 4)
    history = Path(path, ".hoodie/timeline/history")
    manifest = history / "manifest_1"
    good = manifest.read_bytes()
    manifest.write_bytes(b"{not json")
    with pytest.raises(CorruptFileError) as err:
        load_archived_instants(ST, path, table.config)
    assert err.value.path == str(manifest)
    manifest.write_bytes(b'{"files": [{"fileName": 3}]}')
    with pytest.raises(CorruptFileError) as err:
        archived_completion_times(ST, path, table.config)
    assert err.value.path == str(manifest)
    manifest.write_bytes(good)
    (history / "_version_").write_text("7")
    with pytest.raises(CorruptFileError) as err:
        load_archived_instants(ST, path, table.config)
    assert err.value.path == str(history / "_version_") and "manifest_7" in str(err.value)
    (history / "_version_").write_text("1")
    data_file = next(history.glob("*.parquet"))
    data_file.write_bytes(b"PAR1garbagePAR1")
    with pytest.raises(CorruptFileError) as err:
        load_archived_instants(ST, path, table.config)
    assert err.value.path == str(data_file)
    # undecodable metadata in a readable row: InvalidPlanError on decode, naming the file
    row = lsm_row(read_archive_sources(ST, path, table.config, list(table.timeline().completed())[:1])[0])
    data_file.write_bytes(encode_lsm_file([{**row, "metadata": b"Obj\x01broken"}]))
    (got,) = load_archived_instants(ST, path, table.config)
    with pytest.raises(InvalidPlanError) as perr:
        got.decode_metadata()
    assert perr.value.path == str(data_file) and got.requested_time in str(perr.value)


def test_missing_history_reads_empty(tmp_path: Path) -> None:
    for name in (V6, V9):
        path, table = _table(name, tmp_path / name.replace("/", "_"))
        assert load_archived_instants(ST, path, table.config) == []
        assert archived_completion_times(ST, path, table.config) == {}
        shutil.rmtree(Path(path, table.config.history_folder))
        assert load_archived_instants(ST, path, table.config) == []
        assert archived_completion_times(ST, path, table.config) == {}


def test_lsm_compaction_and_cleaning(tmp_path: Path) -> None:
    path, table = _table(V9, tmp_path)
    done = list(table.timeline().completed())
    sources = read_archive_sources(ST, path, table.config, done)
    history = Path(path, ".hoodie/timeline/history")
    for source in sources:  # one archival per instant, each followed by compaction and cleaning, as Hudi does
        archive_instants(ST, path, table.config, [source])
        compact_lsm(ST, path, table.config, batch_size=3)
    t = [i.requested_time for i in done]
    version, manifest = latest_manifest(ST, str(history))
    assert sorted(manifest.file_names) == sorted([f"{t[0]}_{t[8]}_2.parquet", f"{t[9]}_{t[11]}_1.parquet"])
    assert [a.requested_time for a in load_archived_instants(ST, path, table.config)] == t
    levels = [parse_lsm_file_name(n) for n in manifest.file_names]
    assert sorted(p[2] for p in levels if p) == [1, 2]
    # cleaning kept the newest 3 (+1 per compaction of the last run) manifests and only files they list
    manifests = sorted(int(n.split("_")[1]) for n in os.listdir(history) if n.startswith("manifest_"))
    assert manifests == list(range(version - 3, version + 1))
    kept: set[str] = set()
    for v in manifests:
        kept.update(archive_lsm.read_manifest(ST, str(history), v).file_names)
    assert {n for n in os.listdir(history) if n.endswith(".parquet")} == kept
    # a target size below every file leaves nothing to merge
    archive_instants(ST, path, table.config, sources[:1])
    assert compact_lsm(ST, path, table.config, batch_size=2, target_file_max_bytes=1) == []


def test_archive_every_fixture_table_and_read_it_back(tmp_path: Path) -> None:
    names = fixture_names()
    if not names:
        pytest.skip("no fixtures")
    for name in names:
        root = fixture_table(name, tmp_path / name.replace("/", "_"))
        tables = [root] + ([root / ".hoodie/metadata"] if (root / ".hoodie/metadata/.hoodie").is_dir() else [])
        for table_path in tables:
            path, table = str(table_path), HudiTable.open(ST, str(table_path))
            done = _archive_all(path, table)
            got = load_archived_instants(ST, path, table.config, completed_only=True)
            assert [(a.requested_time, a.action) for a in got] == [
                (i.requested_time, i.completed_action(table.config.layout_version)) for i in done
            ], path
            for a in got:
                a.decode_metadata()
                a.decode_plan()
            if table.config.layout_version == 2:
                assert {a.requested_time: a.completion_time for a in got} == {
                    i.requested_time: i.completion_time for i in done
                }
                with_plan = {a.requested_time for a in got if a.plan is not None}
                assert with_plan == {i.requested_time for i in done if _has_plan(table, i)}, path


def _has_plan(table: HudiTable, instant: Instant) -> bool:
    """Whether Hudi's LSM writer stores a plan for this instant, from its timeline files."""

    def size(state: State) -> int:
        f = Path(table.active.path_of(instant.with_state(state)))
        return f.stat().st_size if f.exists() else -1

    if instant.action in (Action.COMPACTION, Action.LOG_COMPACTION, Action.CLEAN):
        return size(State.REQUESTED) >= 0
    if instant.action in (Action.CLUSTERING, Action.REPLACE_COMMIT):
        return size(State.REQUESTED) > 0 or size(State.INFLIGHT) > 0
    return False


def test_writers_reject_other_layouts(tmp_path: Path) -> None:
    path, table = _table(V9, tmp_path)
    with pytest.raises(InvalidPlanError):
        archive_instants_v6(ST, path, table.config, [])
    pending = ArchiveSource(Instant("20260307135725866", Action.COMMIT, State.INFLIGHT), b"")
    with pytest.raises(InvalidPlanError):
        archive_instants(ST, path, table.config, [pending])
    assert ARROW_SCHEMA.names[0] == "instantTime"


# --- hudi-rs ---------------------------------------------------------------------------------------


@pytest.mark.oracle
@pytest.mark.parametrize(("name", "count"), [(V6, 1), (V9, 5), ("sample_table/mor/avro/v9_txns_nonpart_nometa", 4)])
def test_hudi_rs_reads_the_same_after_archival(name: str, count: int, tmp_path: Path) -> None:
    path, table = _table(name, tmp_path)
    rows_before, slices_before = hudi_read(path), hudi_slices(path)
    done = _archive_all(path, table, count)
    for i in done:
        table.active.delete_completed(i)
    assert table.reload().first() is not None
    assert table.timeline().first().requested_time > done[-1].requested_time  # type: ignore[union-attr]
    assert [a.requested_time for a in load_archived_instants(ST, path, table.config, completed_only=True)] == [
        i.requested_time for i in done
    ]
    assert hudi_slices(path) == slices_before
    after = hudi_read(path)
    assert after.num_rows == rows_before.num_rows
    assert after.equals(rows_before)


@pytest.mark.moto
def test_archive_on_s3(s3_bucket: tuple[Storage, str], tmp_path: Path) -> None:
    storage, root = s3_bucket
    for name in (V6, V9):
        path, table = _table(name, tmp_path / name.replace("/", "_"))
        sources = read_archive_sources(ST, path, table.config, table.timeline().completed())
        base = f"{root}/{Path(path).name}"
        written = archive_instants(storage, base, table.config, sources)
        assert written and all(w.startswith(f"{base}/{table.config.history_folder}/") for w in written)
        if table.config.layout_version == 1:
            assert archive_instants(storage, base, table.config, sources[:1])[0].endswith(".commits_.archive.2_1-0-1")
        got = load_archived_instants(storage, base, table.config, completed_only=True)
        assert [a.requested_time for a in got] == [s.instant.requested_time for s in sources]
        for a, source in zip(got, sources, strict=True):
            md = a.decode_metadata()
            assert isinstance(md, HoodieCommitMetadata)
            original = decode_commit_metadata(source.completed, path="x")
            assert md.partition_to_write_stats == original.partition_to_write_stats


@pytest.mark.oracle
def test_hudi_rs_incremental_reads_ignore_the_history(tmp_path: Path) -> None:
    path, table = _table(V9, tmp_path)
    done = list(table.timeline().completed())
    start, end = "20260307135700000", done[6].requested_time
    before = hudi_read(path, start=start, end=end).num_rows
    _archive_all(path, table, 5)
    for i in done[:5]:
        table.active.delete_completed(i)
    after = hudi_read(path, start=start, end=end).num_rows
    assert (before, after) == (6, 1)  # hudi-rs only sees the instants of the range still on the active timeline
