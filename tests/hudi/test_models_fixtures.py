"""Every timeline file of every real fixture table decodes with our models and re-encodes to Hudi's bytes."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import fastavro
import pytest

from tableservice.hudi.models import (
    HoodieCommitMetadata,
    HoodieCompactionPlan,
    HoodieIndexCommitMetadata,
    HoodieIndexPlan,
    HoodieReplaceCommitMetadata,
    HoodieRequestedReplaceMetadata,
    HoodieRollbackMetadata,
    HoodieRollbackPlan,
    TimelineContent,
    all_writer_schemas,
    decode_clustering_plan,
    decode_commit_metadata,
    decode_compaction_plan,
    decode_instant_content,
    decode_rollback_plan,
    encode_commit_metadata,
    encode_compaction_plan,
    encode_index_commit_metadata,
    encode_index_plan,
    encode_requested_replace_metadata,
    encode_rollback_metadata,
    encode_rollback_plan,
    schema_to_json,
)
from tableservice.hudi.models.avro_io import parsed_schema, sync_marker_of
from tests.support.fixtures import REPO, fixture_names, fixture_root, fixture_table_readonly

REFERENCE_AVSC = REPO.parent / "shared" / "reference" / "avsc"
_NAME_RE = re.compile(r"^(\d+)(?:_(\d+))?\.([a-z]+)(?:\.(requested|inflight))?$")


def _instant_files(table: Path) -> list[tuple[Path, str, str]]:
    """(file, action, state) of every instant file of the data table's active timeline."""
    out = []
    for folder in (table / ".hoodie", table / ".hoodie" / "timeline"):
        if not folder.is_dir():
            continue
        for f in sorted(folder.iterdir()):
            m = _NAME_RE.match(f.name)
            if not f.is_file() or m is None:
                continue
            _, _, action, state = m.groups()
            if action == "inflight" and state is None:  # `<t>.inflight` is a commit's inflight file
                action, state = "commit", "inflight"
            out.append((f, action, state or "completed"))
    return out


def _table_version(table: Path) -> int:
    text = (table / ".hoodie" / "hoodie.properties").read_text()
    found = re.search(r"^hoodie\.table\.version=(\d+)", text, re.M)
    assert found is not None
    return int(found.group(1))


def _encode(content: TimelineContent, table_version: int) -> bytes:
    if isinstance(content, HoodieCommitMetadata):
        return encode_commit_metadata(content, table_version=table_version)
    if isinstance(content, HoodieRequestedReplaceMetadata):
        return encode_requested_replace_metadata(content, table_version=table_version)
    if isinstance(content, HoodieCompactionPlan):
        return encode_compaction_plan(content, table_version=table_version)
    if isinstance(content, HoodieRollbackPlan):
        return encode_rollback_plan(content, table_version=table_version)
    if isinstance(content, HoodieRollbackMetadata):
        return encode_rollback_metadata(content, table_version=table_version)
    if isinstance(content, HoodieIndexPlan):
        return encode_index_plan(content, table_version=table_version)
    if isinstance(content, HoodieIndexCommitMetadata):
        return encode_index_commit_metadata(content, table_version=table_version)
    raise AssertionError(f"no fixture holds {type(content).__name__}")


def _with_sync(ours: bytes, original: bytes) -> bytes:
    """`ours` with its random sync marker replaced by the original file's."""
    mine, theirs = sync_marker_of(ours), sync_marker_of(original)
    if mine is None or theirs is None:
        return ours
    return ours.replace(mine, theirs)


def _reference_schemas() -> dict[str, dict[str, Any]]:
    """Reference writer schemas by `v6/Name` and `v8/Name`, from ../shared/reference/avsc."""
    out: dict[str, dict[str, Any]] = {}
    for p in sorted(REFERENCE_AVSC.glob("*.avsc")):
        schema = json.loads(p.read_text())
        versions = p.stem.split("__tv")[1]
        if versions.startswith("6"):
            out[f"v6/{schema['name']}"] = schema
        if "8" in versions or "9" in versions:
            out[f"v8/{schema['name']}"] = schema
    return out


FIXTURES = fixture_names()


def test_fixture_tables_are_present() -> None:
    root = fixture_root()
    assert len(list(root.rglob("*.zip"))) >= 14


@pytest.mark.parametrize("name", FIXTURES or ["none"])
def test_every_timeline_file_decodes_and_reencodes_to_hudis_bytes(name: str) -> None:
    if name == "none":
        pytest.skip("no fixtures")
    table = fixture_table_readonly(name)
    tv = _table_version(table)
    files = _instant_files(table)
    if "v6_empty" in name:
        assert files == []
        return
    assert files, f"{name} has no timeline files"
    for f, action, state in files:
        data = f.read_bytes()
        content = decode_instant_content(data, action=action, state=state, path=str(f))
        if content is None or not data:  # an empty commit file (Hudi 0.14's COW `.inflight`) is empty metadata
            assert data == b"", f
            empty = isinstance(content, HoodieCommitMetadata) and not content.partition_to_write_stats
            assert content is None or empty, f
            continue
        assert decode_instant_content(data, action=action, state=state, path=str(f)) == content
        ours = _encode(content, tv)
        # (b) re-encoding reproduces Hudi's bytes (Avro: up to the random sync marker; JSON: exactly)
        assert _with_sync(ours, data) == data, f
        # ... and decodes to the same model
        assert decode_instant_content(ours, action=action, state=state, path=str(f)) == content
        if tv == 6 and data[:1] == b"{":
            # (c) v6 JSON parses back to the same dict as the real file
            assert json.loads(ours) == json.loads(data)


@pytest.mark.parametrize("name", FIXTURES or ["none"])
def test_our_avro_reads_with_the_reference_writer_schemas(name: str) -> None:
    if name == "none":
        pytest.skip("no fixtures")
    if not REFERENCE_AVSC.is_dir():
        pytest.skip(f"{REFERENCE_AVSC} is absent")
    refs = _reference_schemas()
    table = fixture_table_readonly(name)
    tv = _table_version(table)
    label = "v6" if tv == 6 else "v8"
    checked = 0
    for f, action, state in _instant_files(table):
        data = f.read_bytes()
        content = decode_instant_content(data, action=action, state=state, path=str(f))
        if content is None or data[:4] != b"Obj\x01":
            continue
        ours = _encode(content, tv)
        writer = json.loads(fastavro.reader(io.BytesIO(ours)).metadata["avro.schema"])
        ref = refs.get(f"{label}/{writer['name']}")
        assert ref is not None, f"no reference schema for {label}/{writer['name']}"
        assert writer == ref  # same schema as Hudi's writer, up to key order
        ours_read = list(fastavro.reader(io.BytesIO(ours), reader_schema=parsed_schema(ref)))
        theirs_read = list(fastavro.reader(io.BytesIO(data), reader_schema=parsed_schema(ref)))
        assert ours_read == theirs_read == [content.to_avro()]
        checked += 1
    if "v6_empty" not in name:
        assert checked > 0 or tv == 6


def test_embedded_schema_texts_are_ours_byte_for_byte() -> None:
    """Every distinct writer schema text in the real files equals one of ours exactly."""
    root = fixture_root()
    ours = {schema_to_json(s) for s in all_writer_schemas().values()}
    seen: set[str] = set()
    for name in fixture_names():
        for f in (fixture_table_readonly(name) / ".hoodie").rglob("*"):
            if f.is_file() and f.read_bytes()[:4] == b"Obj\x01":
                seen.add(fastavro.reader(io.BytesIO(f.read_bytes())).metadata["avro.schema"])
    assert root.is_dir() and len(seen) >= 9
    assert seen <= ours, [s[:80] for s in seen - ours]


def _timeline(name: str) -> Path:
    table = fixture_table_readonly(name)
    timeline = table / ".hoodie" / "timeline"
    return timeline if timeline.is_dir() else table / ".hoodie"


def test_real_values_v9_compaction_and_clustering() -> None:
    fixture_root()
    tl = _timeline("sample_table/mor/avro/v9_txns_simple_meta")
    path = tl / "20260307162618152.compaction.requested"
    plan = decode_compaction_plan(path.read_bytes(), path=str(path))
    assert plan.version == 2 and plan.preserve_hoodie_metadata is False and plan.strategy is None
    assert plan.extra_metadata == {} and plan.missing_schedule_partitions == ()
    assert plan.operations is not None and len(plan.operations) == 2
    op = plan.operations[0]
    assert op.base_instant_time == "20260307162557587" and op.partition_path == "region=us"
    assert op.data_file_path == "3e93c8a9-fda0-4e8a-91dc-b4ade7dab76d-0_1-27-53_20260307162557587.parquet"
    assert op.delta_file_paths is not None and len(op.delta_file_paths) == 2
    assert op.metrics == {
        "TOTAL_LOG_FILES_SIZE": 3855.0,
        "TOTAL_IO_READ_MB": 0.0,
        "TOTAL_LOG_FILES": 2.0,
        "TOTAL_IO_MB": 0.0,
        "TOTAL_IO_WRITE_MB": 0.0,
    }

    completed = tl / "20260307162618152_20260307162619230.commit"
    md = decode_commit_metadata(completed.read_bytes(), path=str(completed))
    assert type(md) is HoodieCommitMetadata
    assert md.compacted is True and md.operation_type == "COMPACT" and md.version is None
    assert md.partition_to_write_stats is not None and list(md.partition_to_write_stats) == ["region=us", "region=apac"]
    stat = md.write_stats()[0]
    assert stat.prev_commit == "20260307162557587" and stat.total_log_files_compacted == 2
    assert stat.total_log_size_compacted == 3855 and stat.num_deletes == 1
    assert stat.prev_base_file == "3e93c8a9-fda0-4e8a-91dc-b4ade7dab76d-0_1-27-53_20260307162557587.parquet"
    assert stat.runtime_stats is not None and stat.runtime_stats.total_upsert_time == 126

    clustering = tl / "20260307162619269.clustering.requested"
    cplan = decode_clustering_plan(clustering.read_bytes(), path=str(clustering))
    assert cplan.preserve_hoodie_metadata is True and cplan.version == 1
    assert cplan.strategy is not None
    assert cplan.strategy.strategy_class_name == (
        "org.apache.hudi.client.clustering.run.strategy.SparkSortAndSizeExecutionStrategy"
    )
    assert cplan.input_groups is not None and [len(g.slices or ()) for g in cplan.input_groups] == [2, 1, 2]
    first = cplan.input_groups[0].slices
    assert first is not None and first[0].bootstrap_file_path == "" and first[0].delta_file_paths == ()
    assert (first[0].data_file_path or "").startswith("file:/tmp/v9-gen/warehouse/")


def test_real_values_v6_json_replace_and_rollback() -> None:
    fixture_root()
    tl = _timeline("sample_table/cow/v6_simplekeygen_nonhivestyle_overwritetable")
    done = tl / "20240707001303088.replacecommit"
    md = decode_commit_metadata(done.read_bytes(), path=str(done))
    assert isinstance(md, HoodieReplaceCommitMetadata)
    assert md.operation_type == "INSERT_OVERWRITE_TABLE" and md.compacted is False
    assert md.partition_to_replace_file_ids == {
        "30": ("d398fae1-c0e6-4098-8124-f55f7098bdba-0",),
        "20": ("88163884-fef0-4aab-865d-c72327a8a1d5-0",),
        "10": ("4f2685a3-614f-49ca-9b2b-e1cb9fb61f27-0",),
    }
    stat = md.write_stats()[0]
    assert stat.prev_commit == "null" and stat.num_inserts == 1 and stat.total_write_bytes == 441392
    assert md.table_schema is not None and md.table_schema.startswith('{"type":"record"')

    requested = tl / "20240707001303088.replacecommit.requested"
    req = decode_instant_content(requested.read_bytes(), action="replacecommit", state="requested", path="r")
    assert req == HoodieRequestedReplaceMetadata(
        operation_type=None, clustering_plan=None, extra_metadata=None, version=None
    )

    rb = _timeline("sample_table/mor/parquet/v6_nonpartitioned_rollback") / "20250126040936578.rollback.requested"
    plan = decode_rollback_plan(rb.read_bytes(), path=str(rb))
    assert plan.instant_to_rollback is not None and plan.instant_to_rollback.commit_time == "20250126040826878"
    assert plan.rollback_requests is not None and len(plan.rollback_requests) == 2
    assert plan.rollback_requests[1].log_blocks_to_be_deleted == {
        "file:/opt/data/external_tables/v6_nonpartitioned_rollback/"
        ".0712b9f9-d2d5-4cae-bcf4-8fd7146af503-0_20250126040823628.log.1_0-33-43": 11828
    }


def test_v6_delta_write_stats_keep_json_only_keys() -> None:
    fixture_root()
    f = _timeline("sample_table/mor/parquet/v6_nonpartitioned_rollback") / "20250126060846931.deltacommit"
    md = decode_commit_metadata(f.read_bytes(), path=str(f))
    stat = md.write_stats()[0]
    assert stat.json_extras == {"recordsStats": {"val": None}}
    assert stat.log_version == 3 and stat.base_file is not None and stat.log_files is not None
    assert len(stat.log_files) == 3
    # written as Avro (v8), the JSON-only key is dropped and everything else survives
    avro = encode_commit_metadata(md, table_version=8)
    back = decode_commit_metadata(avro, path="x")
    assert back.write_stats()[0].log_files == stat.log_files
    assert back.write_stats()[0].json_extras == {}
