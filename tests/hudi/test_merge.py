"""Record merging of merged reads (tableservice.hudi.file_group.merge) against Hudi's rules and a plain Python model."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tableservice.errors import CorruptFileError, InvalidTableConfigError, UnsupportedTableError
from tableservice.hudi.file_group.merge import (
    COMMIT_TIME_STRATEGY_ID,
    EVENT_TIME_STRATEGY_ID,
    PAYLOAD_STRATEGY_ID,
    DeltaRecords,
    MergeConfig,
    MergeMode,
    PartialUpdateMode,
    merge_base_batch,
    merge_config_from_properties,
    merge_file_slice,
    register_merger,
    remaining_inserts,
    unregister_merger,
)
from tests.support.fixtures import fixture_names, fixture_table_readonly
from tests.support.merge_cases import (
    COMMIT,
    COUNTING_MERGER_ID,
    EVENT,
    KEY,
    SCHEMA,
    CountingMerger,
    ReadRows,
    by_key,
    cfg,
)


def rows(
    keys: Sequence[str], ts: Sequence[int | None], v1: Sequence[str | None] | None = None, **extra: Sequence[Any]
) -> pa.Table:
    data: dict[str, Any] = {KEY: list(keys), "ts": pa.array(ts, pa.int64())}
    data["v1"] = list(v1) if v1 is not None else [f"{k}@{t}" for k, t in zip(keys, ts, strict=True)]
    data.update(extra)
    return pa.table(data)


def read(config: MergeConfig, base: pa.Table | None, *blocks: tuple[str, Any]) -> ReadRows:
    delta = DeltaRecords(config)
    for kind, payload in blocks:
        if kind == "data":
            delta.add_data(payload)
        elif kind == "partial":
            delta.add_data(payload, partial=True)
        else:
            keys, values = payload
            delta.add_deletes(pa.array(keys), values)
    result = merge_file_slice(base, delta, schema=base.schema if base is not None else None)
    assert result.num_rows == len(set(result.column(KEY).to_pylist()))
    return by_key(result)


# ---- merge mode from hoodie.properties ------------------------------------------------------------------------

V6_OVERWRITE = {
    "hoodie.table.version": "6",
    "hoodie.compaction.payload.class": "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload",
    "hoodie.table.precombine.field": "ts",
    "hoodie.compaction.record.merger.strategy": EVENT_TIME_STRATEGY_ID,
}
V8_DEFAULT = {
    "hoodie.compaction.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
    "hoodie.table.precombine.field": "ts",
    "hoodie.record.merge.strategy.id": EVENT_TIME_STRATEGY_ID,
    "hoodie.record.merge.mode": "EVENT_TIME_ORDERING",
}
V9_EVENT = {"hoodie.table.ordering.fields": "txn_ts", "hoodie.record.merge.mode": "EVENT_TIME_ORDERING"}


@pytest.mark.parametrize(
    ("props", "version", "mode", "ordering"),
    [
        (V6_OVERWRITE, 6, COMMIT, ("ts",)),  # the payload decides before v8, whatever the strategy id says
        ({"hoodie.table.precombine.field": "longField"}, 6, EVENT, ("longField",)),  # no payload: Default payload
        ({}, 6, EVENT, ()),
        (V8_DEFAULT, 8, EVENT, ("ts",)),
        (V9_EVENT, 9, EVENT, ("txn_ts",)),
        (
            {"hoodie.table.ordering.fields": "a, b", "hoodie.record.merge.mode": "event_time_ordering"},
            9,
            EVENT,
            ("a", "b"),
        ),
        ({"hoodie.record.merge.mode": "COMMIT_TIME_ORDERING"}, 9, COMMIT, ()),
        # v8 without a merge mode: the strategy id wins over the payload; v9: the payload wins.
        (
            {
                "hoodie.record.merge.strategy.id": COMMIT_TIME_STRATEGY_ID,
                "hoodie.compaction.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
            },
            8,
            COMMIT,
            (),
        ),
        (
            {
                "hoodie.record.merge.strategy.id": COMMIT_TIME_STRATEGY_ID,
                "hoodie.table.legacy.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
            },
            9,
            EVENT,
            (),
        ),
        (
            {
                "hoodie.table.precombine.field": "ts",
                "hoodie.compaction.payload.class": "com.uber.hoodie.common.model.OverwriteWithLatestAvroPayload",
            },
            6,
            COMMIT,
            ("ts",),
        ),
    ],
)
def test_merge_mode_inference(props: dict[str, str], version: int, mode: MergeMode, ordering: tuple[str, ...]) -> None:
    config = merge_config_from_properties(props, version)
    assert (config.mode, config.ordering_fields) == (mode, ordering)


def test_payloads_with_builtin_equivalents() -> None:
    partial = merge_config_from_properties(
        {
            "hoodie.compaction.payload.class": "org.apache.hudi.common.model.PartialUpdateAvroPayload",
            "hoodie.table.precombine.field": "ts",
            "hoodie.compaction.record.merger.strategy": PAYLOAD_STRATEGY_ID,
        },
        6,
    )
    assert (partial.mode, partial.partial_update_mode) == (EVENT, PartialUpdateMode.IGNORE_DEFAULTS)
    dms = merge_config_from_properties(
        {"hoodie.compaction.payload.class": "org.apache.hudi.common.model.AWSDmsAvroPayload"}, 8
    )
    assert (dms.mode, dms.delete_field, dms.delete_marker) == (COMMIT, "Op", "D")
    v9 = merge_config_from_properties(
        {
            "hoodie.record.merge.mode": "EVENT_TIME_ORDERING",
            "hoodie.table.partial.update.mode": "FILL_UNAVAILABLE",
            "hoodie.record.merge.property.hoodie.write.partial.update.unavailable.value": "__debezium_unavailable"
            + "_value",
            "hoodie.table.ordering.fields": "_event_lsn",
        },
        9,
    )
    assert (v9.partial_update_mode, v9.unavailable_marker) == (
        PartialUpdateMode.FILL_UNAVAILABLE,
        "__debezium_unavailable_value",
    )


def test_unknown_custom_strategies_are_refused_naming_the_value() -> None:
    with pytest.raises(UnsupportedTableError, match="0a0a0a0a-1111"):
        merge_config_from_properties(
            {"hoodie.record.merge.mode": "CUSTOM", "hoodie.record.merge.strategy.id": "0a0a0a0a-1111"}, 8
        )
    with pytest.raises(UnsupportedTableError, match=r"com\.example\.MyPayload"):
        merge_config_from_properties({"hoodie.compaction.payload.class": "com.example.MyPayload"}, 6)
    with pytest.raises(UnsupportedTableError, match="table version 7"):
        merge_config_from_properties({}, 7)
    with pytest.raises(InvalidTableConfigError, match="LATEST_WINS"):
        merge_config_from_properties({"hoodie.record.merge.mode": "LATEST_WINS"}, 9)


def test_fixture_tables_merge_modes() -> None:
    expected = {
        "quickstart_trips_table/mor/avro/v6_trips_8i1u": (COMMIT, ("ts",)),
        "quickstart_trips_table/mor/avro/v8_trips_8i3u1d": (EVENT, ("ts",)),
        "sample_table/cow/v6_nonpartitioned": (EVENT, ("longField",)),
        "sample_table/cow/v6_empty": (EVENT, ()),
        "sample_table/mor/avro/v9_txns_simple_meta": (EVENT, ("txn_ts",)),
    }
    names = fixture_names()
    if not names:
        fixture_table_readonly(next(iter(expected)))  # skips (or fails in CI) with the reason
    for name, want in expected.items():
        props = read_properties(fixture_table_readonly(name) / ".hoodie" / "hoodie.properties")
        config = merge_config_from_properties(props, int(props["hoodie.table.version"]))
        assert (config.mode, config.ordering_fields) == want, name


def read_properties(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip().replace("\\:", ":")
    return out


# ---- COMMIT_TIME_ORDERING -------------------------------------------------------------------------------------


def test_commit_time_later_write_wins_and_logs_beat_base() -> None:
    base = rows(["a", "b", "c"], [9, 9, 9])
    got = read(cfg(COMMIT), base, ("data", rows(["a", "b"], [1, 5])), ("data", rows(["a"], [0], ["a-last"])))
    assert (got["a"]["v1"], got["a"]["ts"], got["b"]["ts"], got["c"]["ts"]) == ("a-last", 0, 5, 9)


def test_commit_time_deletes_win_when_later_and_lose_when_earlier() -> None:
    base = rows(["a", "b"], [1, 1])
    got = read(
        cfg(COMMIT),
        base,
        ("data", rows(["a", "x"], [2, 2])),
        ("del", (["a", "x"], pa.array([7, 7]))),
        ("del", (["b"], None)),
        ("data", rows(["b"], [0], ["b-back"])),
    )
    assert set(got) == {"b"} and got["b"]["v1"] == "b-back"


# ---- EVENT_TIME_ORDERING --------------------------------------------------------------------------------------


def test_event_time_highest_ordering_wins_ties_go_to_the_later_write() -> None:
    base = rows(["a", "b", "c"], [5, 5, 5], ["a0", "b0", "c0"])
    got = read(
        cfg(),
        base,
        ("data", rows(["a", "b", "c", "n"], [4, 5, 6, 1], ["a1", "b1", "c1", "n1"])),
        ("data", rows(["n", "n"], [1, 0], ["n2", "n3"])),
    )
    assert [got[k]["v1"] for k in "abcn"] == ["a0", "b1", "c1", "n2"]


def test_event_time_delete_with_default_ordering_always_wins() -> None:
    base = rows(["a", "b"], [50, 50])
    got = read(
        cfg(),
        base,
        ("data", rows(["a", "b"], [99, 99])),
        ("del", (["a"], pa.array([0], pa.int32()))),
        ("del", (["b"], pa.array([None], pa.int64()))),
    )
    assert got == {}


def test_event_time_delete_with_ordering_value_is_compared() -> None:
    # A long 0 is an ordinary ordering value (only null and the int 0 are Hudi's default).
    got = read(cfg(), rows(["a"], [5]), ("del", (["a"], pa.array([0], pa.int64()))))
    assert set(got) == {"a"}
    base = rows(["a", "b", "c"], [5, 5, 5])
    got = read(cfg(), base, ("del", (["a", "b", "c"], pa.array([4, 5, 6]))))
    assert set(got) == {"a"}  # 4 < 5 keeps the base row; a tie lets the (later) delete win
    got = read(
        cfg(),
        None,
        ("data", rows(["a", "b"], [5, 5])),
        ("del", (["a", "b"], pa.array([4, 5]))),
        ("data", rows(["b"], [4])),
    )
    assert set(got) == {"a"}  # the buffered delete (ordering 5) beats the later write with ordering 4


def test_event_time_after_a_commit_time_delete() -> None:
    # A later write beats a default-ordering delete whatever its ordering; a delete block with an ordering value
    # arriving while such a delete is buffered is dropped (Hudi keeps the buffered delete).
    got = read(
        cfg(),
        None,
        ("data", rows(["a", "b"], [9, 9])),
        ("del", (["a", "b"], pa.array([0, 0], pa.int32()))),
        ("data", rows(["a"], [1], ["a-after"])),
        ("del", (["b"], pa.array([8]))),
        ("data", rows(["b"], [2])),
    )
    assert (got["a"]["v1"], got["b"]["ts"]) == ("a-after", 2)


def test_deleted_flag_and_operation_column_and_delete_marker_remove_records() -> None:
    base = rows(["a", "b", "c", "d"], [1, 1, 1, 1], _hoodie_is_deleted=[False] * 4)
    block = rows(
        ["a", "b", "c", "d"],
        [2, 2, 2, 2],
        _hoodie_is_deleted=[True, False, False, False],
        _hoodie_operation=["U", "D", "U", "U"],
        Op=["U", "U", "D", "U"],
    )
    got = read(cfg(COMMIT, delete_field="Op", delete_marker="D"), base, ("data", block))
    assert set(got) == {"d"} and got["d"]["_hoodie_is_deleted"] is False
    # In event-time mode a flagged record is a delete with its ordering value; with no ordering value it is a
    # default-ordering delete.
    got = read(cfg(), base, ("data", rows(["a", "b"], [0, None], _hoodie_is_deleted=[True, True])))
    assert set(got) == {"a", "c", "d"}


def test_null_ordering_values_are_lowest() -> None:
    got = read(cfg(), rows(["a", "b"], [None, 3]), ("data", rows(["a", "b"], [-5, None], ["a1", "b1"])))
    assert (got["a"]["v1"], got["b"]["ts"]) == ("a1", 3)


def test_multiple_ordering_fields_compare_as_a_tuple() -> None:
    base = rows(["a", "b", "c"], [5, 5, 5], seq=pa.array([1, 1, 1]))
    log = rows(["a", "b", "c"], [5, 5, 4], seq=pa.array([2, 0, 9]))
    got = read(cfg(EVENT, "ts", "seq"), base, ("data", log))
    assert [(got[k]["ts"], got[k]["seq"]) for k in "abc"] == [(5, 2), (5, 1), (5, 1)]
    deletes = pa.StructArray.from_arrays([pa.array([5, 5]), pa.array([1, 0])], names=["ts", "seq"])
    got = read(cfg(EVENT, "ts", "seq"), base, ("del", (["a", "b"], deletes)))
    assert set(got) == {"b", "c"}


# ---- schema evolution, partial updates, custom mergers ---------------------------------------------------------


def test_output_follows_the_base_schema() -> None:
    base = pa.table(
        {KEY: ["a", "b"], "ts": pa.array([1, 1], pa.int64()), "v1": ["a0", "b0"], "v2": pa.array([1, 2], pa.int64())}
    )
    old_log = pa.table({KEY: ["a"], "ts": pa.array([2], pa.int32()), "v2": pa.array([7], pa.int32())})
    new_log = pa.table({KEY: ["c"], "v1": ["c1"], "extra": [1.5], "ts": pa.array([3], pa.int64())})
    delta = DeltaRecords(cfg())
    delta.add_data(old_log)
    delta.add_data(new_log)
    out = merge_file_slice([base.to_batches()[0]], delta)
    assert out.schema == base.schema
    assert by_key(out) == {
        "a": {KEY: "a", "ts": 2, "v1": None, "v2": 7},
        "b": base.to_pylist()[1],
        "c": {KEY: "c", "ts": 3, "v1": "c1", "v2": None},
    }
    assert delta.schema.names == [KEY, "ts", "v2", "v1", "extra"]


def test_keep_values_partial_blocks_fill_missing_columns_from_older_versions() -> None:
    base = pa.table({KEY: ["a", "b"], "ts": pa.array([1, 1]), "v1": ["a0", "b0"], "v2": pa.array([10, 20])})
    got = read(
        cfg(COMMIT),
        base,
        ("partial", pa.table({KEY: ["a", "n"], "v2": pa.array([11, 5])})),
        ("partial", pa.table({KEY: ["a", "n"], "v1": ["a2", "n2"]})),
    )
    assert got["a"] == {KEY: "a", "ts": 1, "v1": "a2", "v2": 11}
    assert got["n"] == {KEY: "n", "ts": None, "v1": "n2", "v2": 5}


def test_ignore_defaults_fills_nulls_of_the_winner_from_the_loser() -> None:
    config = cfg(EVENT, partial_update_mode=PartialUpdateMode.IGNORE_DEFAULTS)
    base = pa.table({KEY: ["a", "b"], "ts": pa.array([5, 5]), "v1": ["a0", None], "v2": pa.array([1, 2])})
    log = pa.table({KEY: ["a", "b"], "ts": pa.array([6, 4]), "v1": [None, "b1"], "v2": pa.array([None, 9])})
    got = read(config, base, ("data", log))
    assert (got["a"]["ts"], got["a"]["v1"], got["a"]["v2"]) == (6, "a0", 1)  # log wins, its nulls filled
    assert (got["b"]["ts"], got["b"]["v1"], got["b"]["v2"]) == (5, "b1", 2)  # base wins, its null filled


def test_fill_unavailable_replaces_marker_values() -> None:
    config = cfg(COMMIT, partial_update_mode=PartialUpdateMode.FILL_UNAVAILABLE, unavailable_marker="__na")
    got = read(config, rows(["a"], [1], ["a0"]), ("data", rows(["a"], [2], ["__na"])))
    assert (got["a"]["ts"], got["a"]["v1"]) == (2, "a0")


@pytest.fixture
def counting_merger() -> Iterator[MergeConfig]:
    register_merger(COUNTING_MERGER_ID, CountingMerger())
    yield merge_config_from_properties(
        {
            "hoodie.record.merge.mode": "CUSTOM",
            "hoodie.record.merge.strategy.id": "6a1c9b7e-0000-4000-8000-000000000001",
            "hoodie.table.ordering.fields": "ts",
        },
        9,
    )
    unregister_merger("6a1c9b7e-0000-4000-8000-000000000001")


def test_custom_merger(counting_merger: MergeConfig) -> None:
    assert counting_merger.mode is MergeMode.CUSTOM
    base = pa.table({KEY: ["a", "b", "c"], "ts": pa.array([1, 1, 1]), "v2": pa.array([1, 1, 1])})
    got = read(
        counting_merger,
        base,
        ("data", pa.table({KEY: ["a", "a", "b"], "v2": pa.array([10, 100, 5])})),
        ("del", (["b"], None)),
        ("data", pa.table({KEY: ["c", "n"], "v2": pa.array([7, 3])})),
    )
    assert {k: r["v2"] for k, r in got.items()} == {"a": 111, "c": 8, "n": 3}


def test_remaining_inserts_by_keys_and_streaming_batches() -> None:
    base = rows([f"k{i}" for i in range(10)], list(range(10)))
    delta = DeltaRecords(cfg(COMMIT))
    delta.add_data(rows(["k1", "k8", "new1", "new2"], [0, 0, 0, 0]))
    delta.add_deletes(pa.array(["k2", "new2"]))
    parts = [merge_base_batch(b, delta) for b in base.to_batches(max_chunksize=3)]
    inserts = remaining_inserts(delta, pa.array(base.column(KEY)), schema=base.schema)
    assert inserts.column(KEY).to_pylist() == ["new1"]
    out = by_key(pa.concat_tables([*parts, inserts]))
    assert sorted(out) == sorted([f"k{i}" for i in range(10) if i != 2] + ["new1"])
    assert out["k8"]["ts"] == 0 and out["k7"]["ts"] == 7


def test_delta_records_inputs_and_accessors() -> None:
    delta = DeltaRecords(cfg(), SCHEMA)
    delta.add_data(rows(["a", "b", "c"], [1, 1, 1]), is_delete=np.array([False, True, False]))
    delta.add_deletes(pa.array(["c"]), pa.array(["not-a-number"]))  # incomparable: the delete wins like Hudi's
    delta.add_deletes(pa.array([], pa.string()))
    assert len(delta) == 3
    assert dict(zip(delta.keys().to_pylist(), delta.deleted().tolist(), strict=True)) == {
        "a": False,
        "b": True,
        "c": True,
    }
    assert delta.to_table().to_pylist() == [{KEY: "a", "ts": 1, "v1": "a@1", "v2": None}]
    assert delta.schema == SCHEMA
    with pytest.raises(CorruptFileError, match=KEY):
        delta.add_data(pa.table({"ts": [1]}))
    with pytest.raises(CorruptFileError, match="null"):
        delta.add_deletes(pa.array(["x", None]))
    two_fields = DeltaRecords(cfg(EVENT, "ts", "seq"))
    with pytest.raises(ValueError, match="struct"):
        two_fields.add_deletes(pa.array(["a"]), pa.array([3]))


@pytest.mark.parametrize("mode", [COMMIT, EVENT])
def test_unmaterialised_state_merges_as_the_materialised_one(mode: MergeMode, monkeypatch: pytest.MonkeyPatch) -> None:
    """A closed-form fold keeps its input rows and the winners' positions (the merge takes what it emits in one take);
    the merged rows, the remaining inserts and a later fold equal those of a state taken at once."""
    from tableservice.hudi.file_group import delta_records

    rng = np.random.default_rng(11)
    base = rows([f"k{i:03d}" for i in range(200)], rng.integers(0, 50, 200).tolist())
    blocks = [
        rows(
            [f"k{int(i):03d}" for i in picks],
            rng.integers(0, 60, len(picks)).tolist(),
            [f"b{b}-{int(i)}" for i in picks],
        )
        for b, picks in enumerate(rng.choice(260, size=(3, 70), replace=True))
    ]

    source_chunks: list[tuple[int, int]] = []  # (before, after) the merge: chunks of the kept input rows' columns

    def merged(lazy_rows_per_key: int) -> tuple[bool, list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        monkeypatch.setattr(delta_records, "_LAZY_MAX_ROWS_PER_KEY", lazy_rows_per_key)
        delta = DeltaRecords(cfg(mode, "ts"), base.schema)
        for block in blocks:
            delta.add_data(block)
        delta.add_deletes(pa.array(["k005", "k250"]), pa.array([99, 99], pa.int64()))
        matched = delta.new_match_mask()
        unmaterialised = delta._rows is not None  # the state is the fold's input rows and the winners' positions
        before = max(c.num_chunks for c in delta._source.columns) if delta._source is not None else 0
        parts = [merge_base_batch(b, delta, schema=base.schema, matched=matched) for b in base.to_batches(60)]
        if delta._source is not None:
            source_chunks.append((before, max(c.num_chunks for c in delta._source.columns)))
        inserts = remaining_inserts(delta, matched, schema=base.schema)
        delta.add_data(rows(["k001", "k300"], [100, 1]))  # folds again, on top of the kept state
        return unmaterialised, pa.concat_tables(parts).to_pylist(), inserts.to_pylist(), delta.to_table().to_pylist()

    lazy_state, *lazy = merged(2)
    eager_state, *eager = merged(0)
    assert (lazy_state, eager_state) == (True, False)  # each run took the path it is named after
    assert lazy == eager
    # The kept rows of the four blocks became one chunk at the first of the four base batches' takes, not a
    # concatenation on every take.
    assert source_chunks == [(4, 1)]
    out, inserts, later = lazy
    assert {r[KEY] for r in inserts} == {f"k{i}" for i in range(200, 260)} & {
        r[KEY] for b in blocks for r in b.to_pylist()
    } - {"k250"}
    assert "k005" not in {r[KEY] for r in out} and any(r[KEY] == "k300" for r in later)


def test_the_kept_rows_become_one_chunk_with_their_rows_and_schema_once() -> None:
    """The first take of emitted rows makes the kept log rows one chunk (same rows, same schema); later takes
    leave them as they are, without copying them again."""
    delta = DeltaRecords(cfg(EVENT, "ts"))
    delta.add_data(rows(["a", "b"], [1, 2]))
    delta.add_data(rows(["c"], [None]))
    assert len(delta) == 3  # folded: the kept rows are the two blocks' rows, one chunk each
    source = delta._source
    assert source is not None and [c.num_chunks for c in source.columns] == [2] * source.num_columns
    emitted = delta.state_rows(np.array([0, 2]))
    one = delta._source
    assert one is not None and [c.num_chunks for c in one.columns] == [1] * one.num_columns
    assert one.schema == source.schema and one.to_pylist() == source.to_pylist()
    assert [r[KEY] for r in emitted.to_pylist()] == ["a", "c"]
    delta.state_rows(np.array([1]))
    again = delta._source
    assert again is not None
    assert [c.chunk(0).buffers()[-1].address for c in again.columns] == [
        c.chunk(0).buffers()[-1].address for c in one.columns
    ]


def test_combined_gives_one_array_of_the_same_values() -> None:
    from tableservice.hudi.file_group.merge_core import combined

    chunked = pa.chunked_array([["a", None], [], ["c"]])
    one = combined(chunked)
    assert isinstance(one, pa.Array) and one.to_pylist() == ["a", None, "c"] and one.type == pa.string()
    array = pa.array([1, 2])
    assert combined(array) is array
