"""Codec behaviour without fixtures: schemas vs models, bad input, empty files, round trips (hypothesis)."""

from __future__ import annotations

import io
import json
from typing import Any, TypeVar

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tableservice.errors import InvalidPlanError, UnsupportedTableError
from tableservice.hudi import models as m
from tableservice.hudi.models import (
    HoodieCleanerPlan,
    HoodieCleanMetadata,
    HoodieCommitMetadata,
    HoodieCompactionOperation,
    HoodieCompactionPlan,
    HoodieReplaceCommitMetadata,
    HoodieSavepointMetadata,
    HoodieWriteStat,
    HudiModel,
    all_writer_schemas,
    decode_clean_metadata,
    decode_cleaner_plan,
    decode_commit_metadata,
    decode_compaction_plan,
    decode_instant_content,
    decode_requested_replace_metadata,
    decode_savepoint_metadata,
    encode_clean_metadata,
    encode_cleaner_plan,
    encode_commit_metadata,
    encode_compaction_plan,
    encode_savepoint_metadata,
    read_avro_container,
    write_avro_container,
    writer_schema,
)
from tableservice.hudi.models.avro_io import parsed_schema
from tableservice.hudi.models.jackson_json import jackson_pretty, jackson_string, java_double
from tableservice.hudi.models.schemas import Kind

M = TypeVar("M", bound=HudiModel)

# --- schemas and models agree -------------------------------------------------------------------------------


def _named_records(schema: Any, out: dict[str, list[list[str]]]) -> None:
    if isinstance(schema, list):
        for s in schema:
            _named_records(s, out)
    elif isinstance(schema, dict):
        if schema.get("type") == "record":
            out.setdefault(schema["name"], []).append([f["name"] for f in schema["fields"]])
            for f in schema["fields"]:
                _named_records(f["type"], out)
        elif schema.get("type") == "array":
            _named_records(schema["items"], out)
        elif schema.get("type") == "map":
            _named_records(schema["values"], out)


def _model_classes() -> list[type[HudiModel]]:
    found = [getattr(m, n) for n in m.__all__]
    return [c for c in found if isinstance(c, type) and issubclass(c, HudiModel) and c is not HudiModel]


def test_model_fields_are_hudis_fields_in_schema_order() -> None:
    records: dict[str, list[list[str]]] = {}
    for schema in all_writer_schemas().values():
        _named_records(schema, records)
    classes = _model_classes()
    assert len(classes) >= 30
    for cls in classes:
        shapes = records[cls.avro_name]
        fullest = max(shapes, key=len)
        assert cls.hudi_field_names() == fullest, cls.__name__
        for shape in shapes:  # older versions of a record are prefixes of the newest
            assert fullest[: len(shape)] == shape, cls.__name__


def test_every_schema_is_self_contained_and_parses() -> None:
    for key, schema in all_writer_schemas().items():
        text = m.schema_to_json(schema)
        # a fresh name space: a dangling reference would fail here
        fastavro.parse_schema(json.loads(text), named_schemas={})
        assert '"namespace":"org.apache.hudi.avro.model"' in text, key
        assert text.count('"name":"HoodieWriteStat"') <= 1, key


def test_archive_entry_schema_defines_each_record_once_and_refers_after() -> None:
    text = m.schema_to_json(writer_schema(Kind.ARCHIVED_META_ENTRY, 6))
    assert text.count('"name":"HoodieWriteStat","fields"') == 1
    assert '"type":["null","HoodieWriteStat"]' in text  # compaction write stat refers to it
    assert '{"name":"HoodieInflightReplaceMetadata","type":["null","HoodieCommitMetadata"],"default":null}' in text
    assert text.endswith(
        '{"name":"stateTransitionTime","type":["null",{"type":"string","avro.java.string":"String"}],"default":null}]}'
    )


def test_writer_schema_by_table_version() -> None:
    assert "missingSchedulePartitions" in m.schema_to_json(writer_schema(Kind.COMPACTION_PLAN, 9))
    assert "missingSchedulePartitions" not in m.schema_to_json(writer_schema(Kind.COMPACTION_PLAN, 6))
    assert "missingSchedulePartitions" not in m.schema_to_json(writer_schema(Kind.REQUESTED_REPLACE_METADATA, 6))
    with pytest.raises(UnsupportedTableError, match="table version 7"):
        writer_schema(Kind.CLEANER_PLAN, 7)
    with pytest.raises(UnsupportedTableError):
        encode_commit_metadata(HoodieCommitMetadata.empty(), table_version=5)


# --- bad input ----------------------------------------------------------------------------------------------

_OP = HoodieCompactionOperation(base_instant_time="001", file_id="f-0", partition_path="p", metrics={"X": 1.0})
_PLAN = HoodieCompactionPlan(operations=(_OP,), extra_metadata={}, version=2)


def test_garbage_bytes_raise_invalid_plan_naming_the_file() -> None:
    with pytest.raises(InvalidPlanError) as err:
        decode_compaction_plan(b"garbage!", path="/t/.hoodie/001.compaction.requested")
    assert err.value.path == "/t/.hoodie/001.compaction.requested"
    assert "not an Avro container" in str(err.value) and "001.compaction.requested" in str(err.value)
    with pytest.raises(InvalidPlanError, match="neither an Avro container nor JSON"):
        decode_commit_metadata(b"\x00\xff garbage", path="/t/.hoodie/002.commit")
    with pytest.raises(InvalidPlanError, match="not an object"):
        decode_commit_metadata(b"[1, 2]", path="/t/.hoodie/002.commit")
    with pytest.raises(InvalidPlanError, match="partitionToWriteStats"):
        decode_commit_metadata(b'{"partitionToWriteStats": 5}', path="/t/.hoodie/002.commit")


@pytest.mark.parametrize("cut", [5, 40, -30, -17, -1])
def test_truncated_container_raises_invalid_plan(cut: int) -> None:
    data = encode_compaction_plan(_PLAN, table_version=9)
    with pytest.raises(InvalidPlanError) as err:
        decode_compaction_plan(data[:cut], path="/t/x.compaction.requested")
    assert err.value.path == "/t/x.compaction.requested"


def test_plan_with_wrong_schema_raises_invalid_plan() -> None:
    commit = encode_commit_metadata(HoodieCommitMetadata.empty(), table_version=8)
    with pytest.raises(InvalidPlanError) as err:
        decode_compaction_plan(commit, path="/t/.hoodie/timeline/003.compaction.requested")
    assert "HoodieCommitMetadata" in err.value.problem and "HoodieCompactionPlan" in err.value.problem
    assert err.value.path == "/t/.hoodie/timeline/003.compaction.requested"
    # a record named HoodieCompactionPlan whose operation lacks the required fileId
    bad_schema = {
        "type": "record",
        "name": "HoodieCompactionPlan",
        "namespace": "org.apache.hudi.avro.model",
        "fields": [
            {
                "name": "operations",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "Op",
                        "fields": [{"name": "baseInstantTime", "type": "string"}],
                    },
                },
            }
        ],
    }
    data = write_avro_container([{"operations": [{"baseInstantTime": "001"}]}], bad_schema)
    with pytest.raises(InvalidPlanError, match=r"operations\.0\.fileId"):
        decode_compaction_plan(data, path="/t/bad.compaction.requested")
    with pytest.raises(
        InvalidPlanError, match=r"cleaner plan file holds a org\.apache\.hudi\.avro\.model\.HoodieCompactionPlan"
    ):
        decode_cleaner_plan(encode_compaction_plan(_PLAN, table_version=6), path="/t/004.clean.requested")


def test_empty_files() -> None:
    assert decode_commit_metadata(b"", path="x") == HoodieCommitMetadata(
        partition_to_write_stats={}, compacted=False, extra_metadata={}, operation_type="UNKNOWN"
    )
    assert decode_requested_replace_metadata(b"", path="x").clustering_plan is None
    with pytest.raises(InvalidPlanError, match="compaction plan file is empty"):
        decode_compaction_plan(b"", path="x")
    assert decode_instant_content(b"", action="compaction", state="inflight", path="x") is None
    assert decode_instant_content(b"", action="commit", state="requested", path="x") is None
    assert decode_instant_content(b"", action="deltacommit", state="inflight", path="x") == HoodieCommitMetadata.empty()
    with pytest.raises(InvalidPlanError, match=r"no completed file is modelled for action 'compaction'"):
        decode_instant_content(b"x", action="compaction", state="completed", path="x")
    with pytest.raises(InvalidPlanError, match=r"not an Avro container file .* file=x\.restore"):
        decode_instant_content(b"x", action="restore", state="completed", path="x.restore")


def test_container_layout_matches_hudi() -> None:
    data = write_avro_container([_PLAN.to_avro()], writer_schema(Kind.COMPACTION_PLAN, 8), sync_marker=b"S" * 16)
    reader = fastavro.reader(io.BytesIO(data))
    assert list(reader.metadata) == ["avro.schema"]  # Hudi writes no avro.codec key
    assert data.count(b"S" * 16) == 2 and data.endswith(b"S" * 16)
    assert read_avro_container(data, path="x") == [_PLAN.to_avro()]


# --- round trips ---------------------------------------------------------------------------------------------

_text = st.text(max_size=12)
_ids = st.text(alphabet="abcdef0123456789-", min_size=1, max_size=10)
_long = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_opt_long = st.none() | _long
_opt_text = st.none() | _text
_str_map = st.dictionaries(_text, _text, max_size=3)


@st.composite
def _write_stats(draw: st.DrawFn) -> HoodieWriteStat:
    values: dict[str, Any] = {}
    for name in HoodieWriteStat.hudi_field_names():
        if name in ("runtimeStats", "logFiles", "cdcStats", "logVersion"):
            continue
        kind = HoodieWriteStat.model_fields[_snake(name)].annotation
        values[name] = draw(_opt_text if "str" in str(kind) else _opt_long)
    values["logVersion"] = draw(st.none() | st.integers(min_value=-(2**31), max_value=2**31 - 1))
    values["logFiles"] = draw(st.none() | st.lists(_text, max_size=3))
    values["cdcStats"] = draw(st.none() | st.dictionaries(_text, _long, max_size=2))
    values["runtimeStats"] = draw(
        st.none() | st.fixed_dictionaries({"totalScanTime": _opt_long, "totalCreateTime": _opt_long})
    )
    return HoodieWriteStat.from_avro(values)


def _snake(name: str) -> str:
    return next(k for k, v in HoodieWriteStat.model_fields.items() if v.alias == name)


@st.composite
def _commit_metadata(draw: st.DrawFn, *, replace: bool) -> HoodieCommitMetadata:
    stats = draw(st.none() | st.dictionaries(_text, st.lists(_write_stats(), max_size=2).map(tuple), max_size=2))
    common: dict[str, Any] = {
        "partition_to_write_stats": stats,
        "compacted": draw(st.none() | st.booleans()),
        "extra_metadata": draw(st.none() | _str_map),
        "operation_type": draw(st.none() | st.sampled_from(["UPSERT", "INSERT", "COMPACT", "CLUSTER"])),
    }
    if replace:
        ids = st.dictionaries(_text, st.lists(_ids, max_size=3).map(tuple), max_size=2)
        return HoodieReplaceCommitMetadata(**common, partition_to_replace_file_ids=draw(st.none() | ids))
    return HoodieCommitMetadata(**common)


@settings(max_examples=60, deadline=None)
@given(md=st.booleans().flatmap(lambda r: _commit_metadata(replace=r)), table_version=st.sampled_from([6, 8, 9]))
def test_commit_metadata_round_trips(md: HoodieCommitMetadata, table_version: int) -> None:
    data = encode_commit_metadata(md, table_version=table_version)
    back = decode_commit_metadata(data, path="x")
    assert type(back) is type(md)
    assert back == md  # version is 1 on both sides: JSON has no version key, Avro keeps it
    if table_version == 6:
        keys = list(json.loads(data))
        assert keys[:4] == ["partitionToWriteStats", "compacted", "extraMetadata", "operationType"]
        assert "version" not in keys
    else:
        kind = Kind.REPLACE_COMMIT_METADATA if isinstance(md, HoodieReplaceCommitMetadata) else Kind.COMMIT_METADATA
        ref = parsed_schema(writer_schema(kind, table_version))
        assert list(fastavro.reader(io.BytesIO(data), reader_schema=ref)) == [md.to_avro()]


def _model(cls: type[M], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[M]:
    """Instances of `cls` from strategies keyed by attribute name (pydantic's signature uses Hudi's names)."""
    return st.fixed_dictionaries(fields).map(lambda kw: cls(**kw))


_int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
_action_instant = st.none() | _model(
    m.HoodieActionInstant, timestamp=_ids, action=st.sampled_from(["commit", "deltacommit"]), state=_text
)
_file_info = _model(m.HoodieCleanFileInfo, file_path=_opt_text, is_bootstrap_base_file=st.none() | st.booleans())
_cleaner_plans = _model(
    HoodieCleanerPlan,
    earliest_instant_to_retain=_action_instant,
    last_completed_commit_timestamp=_text,
    policy=st.sampled_from(["KEEP_LATEST_COMMITS", "KEEP_LATEST_FILE_VERSIONS", "KEEP_LATEST_BY_HOURS"]),
    files_to_be_deleted_per_partition=st.none()
    | st.dictionaries(_text, st.lists(_text, max_size=2).map(tuple), max_size=2),
    version=st.none() | _int32,
    file_paths_to_be_deleted_per_partition=st.none()
    | st.dictionaries(_text, st.lists(_file_info, max_size=2).map(tuple), max_size=2),
    partitions_to_be_deleted=st.none() | st.lists(_text, max_size=2).map(tuple),
    extra_metadata=st.none() | _str_map,
)
_names = st.lists(_text, max_size=2).map(tuple)
_clean_partition = _model(
    m.HoodieCleanPartitionMetadata,
    partition_path=_text,
    policy=_text,
    delete_path_patterns=_names,
    success_delete_files=_names,
    failed_delete_files=_names,
    is_partition_deleted=st.none() | st.booleans(),
)
_clean_metadata = _model(
    HoodieCleanMetadata,
    start_clean_time=_ids,
    time_taken_in_millis=_long,
    total_files_deleted=_int32,
    earliest_commit_to_retain=_text,
    last_completed_commit_timestamp=_text,
    partition_metadata=st.dictionaries(_text, _clean_partition, max_size=2),
    version=st.none() | _int32,
    bootstrap_partition_metadata=st.none() | st.dictionaries(_text, _clean_partition, max_size=1),
    extra_metadata=st.none() | _str_map,
)
_savepoints = _model(
    HoodieSavepointMetadata,
    savepointed_by=_text,
    savepointed_at=_long,
    comments=_text,
    partition_metadata=st.dictionaries(
        _text,
        _model(m.HoodieSavepointPartitionMetadata, partition_path=_text, savepoint_data_file=_names),
        max_size=2,
    ),
    version=st.none() | _int32,
)


@settings(max_examples=40, deadline=None)
@given(plan=_cleaner_plans, md=_clean_metadata, sp=_savepoints, tv=st.sampled_from([6, 8, 9]))
def test_clean_and_savepoint_round_trip(
    plan: HoodieCleanerPlan, md: HoodieCleanMetadata, sp: HoodieSavepointMetadata, tv: int
) -> None:
    assert decode_cleaner_plan(encode_cleaner_plan(plan, table_version=tv), path="p") == plan
    assert decode_clean_metadata(encode_clean_metadata(md, table_version=tv), path="p") == md
    assert decode_savepoint_metadata(encode_savepoint_metadata(sp, table_version=tv), path="p") == sp


def test_older_writer_fields_take_hudis_defaults() -> None:
    """A cleaner plan written with an old schema (no lastCompletedCommitTimestamp/extraMetadata, no version)."""
    old = {
        "type": "record",
        "name": "HoodieCleanerPlan",
        "namespace": "org.apache.hudi.avro.model",
        "fields": [
            {"name": "earliestInstantToRetain", "type": ["null", "string"], "default": None},
            {"name": "policy", "type": "string"},
        ],
    }
    data = write_avro_container([{"earliestInstantToRetain": None, "policy": "KEEP_LATEST_COMMITS"}], old)
    plan = decode_cleaner_plan(data, path="p")
    assert plan.last_completed_commit_timestamp == "" and plan.version == 1 and plan.extra_metadata is None
    assert plan.policy == "KEEP_LATEST_COMMITS"


def test_v6_compaction_plan_drops_only_the_newer_field() -> None:
    plan = _PLAN.model_copy(update={"missing_schedule_partitions": ("a",)})
    v6 = decode_compaction_plan(encode_compaction_plan(plan, table_version=6), path="p")
    assert v6 == _PLAN and v6.missing_schedule_partitions is None
    assert decode_compaction_plan(encode_compaction_plan(plan, table_version=8), path="p") == plan


# --- Jackson JSON ---------------------------------------------------------------------------------------------


def test_jackson_pretty_printer_layout() -> None:
    value = {"a": [{"x": 1, "y": None}], "b": {}, "c": [], "d": ["s", "t"], "e": {"f": True}}
    assert jackson_pretty(value) == (
        '{\n  "a" : [ {\n    "x" : 1,\n    "y" : null\n  } ],\n  "b" : { },\n  "c" : [ ],\n'
        '  "d" : [ "s", "t" ],\n  "e" : {\n    "f" : true\n  }\n}'
    )
    assert jackson_string('q"\\\n\t\x01é/') == '"q\\"\\\\\\n\\t\\u0001é/"'
    assert [java_double(x) for x in (1.0, 0.5, 1e7, 1.5e-4, 123456.75, -2.0e10)] == [
        "1.0", "0.5", "1.0E7", "1.5E-4", "123456.75", "-2.0E10",
    ]  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(st.none() | st.booleans() | _long | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c))
)
def test_jackson_output_is_json(value: Any) -> None:
    assert json.loads(jackson_pretty(value)) == value


# --- archive entries and LSM rows -------------------------------------------------------------------------------


def test_archived_entry_of_a_commit_round_trips_through_the_archive_schema() -> None:
    stat = HoodieWriteStat(file_id="f-0", path="p/f.parquet", num_writes=3)
    md = HoodieCommitMetadata(
        partition_to_write_stats={"p": (stat,)}, compacted=True, extra_metadata={"schema": "s"}, operation_type="X"
    )
    entry = m.build_archived_meta_entry(
        encode_commit_metadata(md, table_version=6), action="commit", state="completed", instant_time="001", path="x"
    )
    assert entry.action_state == "COMPLETED" and entry.action_type == "commit" and entry.commit_time == "001"
    archived = entry.hoodie_commit_metadata
    assert archived is not None and archived.operation_type == "COMPACT"
    assert archived.extra_metadata == {"schema": "s", "ROLLING_STAT": ""}
    schema = parsed_schema(writer_schema(Kind.ARCHIVED_META_ENTRY, 6))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, entry.to_avro())
    record = fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), schema, None)
    assert isinstance(record, dict)
    assert m.archived_meta_entry_from_record(record, path="x") == entry

    plan_entry = m.build_archived_meta_entry(
        encode_compaction_plan(_PLAN, table_version=6),
        action="compaction",
        state="requested",
        instant_time="002",
        path="y",
    )
    assert plan_entry.hoodie_compaction_plan == _PLAN and plan_entry.action_state == "REQUESTED"


def test_lsm_timeline_instant_row() -> None:
    row = m.HoodieLSMTimelineInstant(instant_time="1", completion_time="2", action="commit", metadata=b"\x00Obj")
    schema = parsed_schema(writer_schema(Kind.LSM_TIMELINE_INSTANT, 9))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, row.to_avro())
    record = fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), schema, None)
    assert isinstance(record, dict)
    back = m.HoodieLSMTimelineInstant.from_avro(record)
    assert back == row and back.version == 1 and back.plan is None


def test_avro_int_ranges_are_checked_at_construction() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        HoodieWriteStat(log_version=2**31)
    with pytest.raises(ValidationError):
        HoodieWriteStat(num_writes=2**63)
    assert HoodieWriteStat(num_writes=2**63 - 1).num_writes == 2**63 - 1


def test_instant_content_accepts_the_timeline_enums() -> None:
    from tableservice.hudi.timeline.instant import Action, State

    assert decode_instant_content(b"", action=Action.COMPACTION, state=State.INFLIGHT, path="x") is None
    data = encode_compaction_plan(_PLAN, table_version=8)
    assert decode_instant_content(data, action=Action.COMPACTION, state=State.REQUESTED, path="x") == _PLAN
    with pytest.raises(InvalidPlanError, match="unknown instant state"):
        decode_instant_content(data, action="compaction", state="done", path="x")


def test_model_names_accept_both_spellings_and_dump_hudis() -> None:
    op = HoodieCompactionOperation.from_avro({"baseInstantTime": "1", "fileId": "f", "dataFilePath": "d.parquet"})
    assert op == HoodieCompactionOperation(base_instant_time="1", file_id="f", data_file_path="d.parquet")
    assert op.to_avro()["dataFilePath"] == "d.parquet" and "data_file_path" not in op.to_avro()
    with pytest.raises(Exception, match="frozen"):
        op.file_id = "g"  # type: ignore[misc]
    rollback = m.HoodieRollbackPlan.from_avro({"RollbackRequests": [{"partitionPath": "p"}]})
    assert rollback.rollback_requests is not None and rollback.rollback_requests[0].files_to_be_deleted == ()
    assert "RollbackRequests" in rollback.to_avro()
