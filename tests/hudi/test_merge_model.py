"""Merged reads (tableservice.hudi.file_group.merge) against a plain Python model of Hudi's rules (hypothesis)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tableservice.hudi.file_group.merge import (
    DeltaRecords,
    MergeConfig,
    MergeMode,
    PartialUpdateMode,
    merge_file_slice,
    register_merger,
    unregister_merger,
)
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

pytestmark = pytest.mark.slow  # a few hundred hypothesis examples per test

# ---- a plain Python model of Hudi's rules (one dict per key, folded in log order) -------------------------------

VALUE_COLUMNS = ("ts", "v1", "v2")


@dataclass
class Version:
    data: dict[str, Any]
    delete: bool = False
    block: bool = False
    ctd: bool = False
    present: frozenset[str] | None = None  # columns carried by a partial version; None = all

    def order(self) -> tuple[bool, int]:
        ts = self.data.get("ts")
        return (ts is not None, ts if ts is not None else 0)


def _fill(winner: Version, loser: Version, mode: PartialUpdateMode) -> Version:
    if winner.delete or loser.delete:
        return winner
    data = dict(winner.data)
    for c in VALUE_COLUMNS:
        carried = winner.present is None or c in winner.present
        if not carried or (mode is PartialUpdateMode.IGNORE_DEFAULTS and data.get(c) is None):
            data[c] = loser.data.get(c)
    present = None if winner.present is None or loser.present is None else winner.present | loser.present
    return Version(data, winner.delete, winner.block, winner.ctd, present)


def _custom(older: Version, newer: Version) -> Version:
    data = dict(newer.data)
    if not older.delete:
        data["v2"] = (older.data.get("v2") or 0) + (newer.data.get("v2") or 0)
    return Version(data, newer.delete, False, newer.delete and data.get("ts") is None)


def model_delta(config: MergeConfig, old: Version | None, new: Version) -> Version:
    if old is None:
        return new
    if config.mode is MergeMode.CUSTOM:
        return _custom(old, new)
    if config.mode is COMMIT:
        return _fill(new, old, config.partial_update_mode)
    if new.block:
        if old.ctd:
            return old
        if new.ctd:
            return new
        return new if new.order() >= old.order() else old
    newer_wins = new.ctd or old.ctd or new.order() >= old.order()
    winner, loser = (new, old) if newer_wins else (old, new)
    return _fill(winner, loser, config.partial_update_mode)


def model_read(config: MergeConfig, base: list[dict[str, Any]], blocks: list[tuple[str, Any]]) -> ReadRows:
    state: dict[str, Version] = {}
    for _kind, payload in blocks:
        for version in payload:
            key = version.data[KEY]
            state[key] = model_delta(config, state.get(key), version)
    out: ReadRows = {}
    for row in base:
        log = state.pop(row[KEY], None)
        if log is None:
            out[row[KEY]] = row
            continue
        base_version = Version(dict(row))
        if config.mode is MergeMode.CUSTOM:
            merged = _custom(base_version, log)
        elif config.mode is EVENT and not log.ctd and log.order() < base_version.order():
            merged = _fill(base_version, log, config.partial_update_mode)
        else:
            merged = _fill(log, base_version, config.partial_update_mode)
        if not merged.delete:
            out[row[KEY]] = {KEY: row[KEY], **{c: merged.data.get(c) for c in VALUE_COLUMNS}}
    for key, version in state.items():
        if not version.delete:
            out[key] = {KEY: key, **{c: version.data.get(c) for c in VALUE_COLUMNS}}
    return out


def to_blocks(blocks: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The model's blocks as calls on DeltaRecords."""
    out: list[tuple[str, Any]] = []
    for kind, versions in blocks:
        if kind == "del":
            values = [v.data.get("ts") for v in versions]
            int32 = [v.ctd and v.data.get("ts") == 0 for v in versions]
            typ = pa.int32() if all(int32) else pa.int64()
            out.append(("del", ([v.data[KEY] for v in versions], pa.array(values, typ))))
            continue
        columns = [KEY, *VALUE_COLUMNS] if kind == "data" else sorted(versions[0].present or ())
        table = pa.table({c: pa.array([v.data.get(c) for v in versions], SCHEMA.field(c).type) for c in columns})
        if kind == "data":
            table = table.append_column(IS_DELETED_COL, pa.array([v.delete for v in versions]))
        out.append((kind, table))
    return out


IS_DELETED_COL = "_hoodie_is_deleted"
KEYS = st.sampled_from(["a", "b", "c"])
TS = st.one_of(st.none(), st.integers(0, 4))


@st.composite
def scenario(
    draw: st.DrawFn, allow_partial: bool, allow_flagged: bool
) -> tuple[list[dict[str, Any]], list[tuple[str, Any]]]:
    base_keys = draw(st.lists(KEYS, unique=True, max_size=5))
    base = [
        {KEY: k, "ts": draw(TS), "v1": draw(st.sampled_from([None, f"{k}0"])), "v2": draw(st.integers(0, 9))}
        for k in base_keys
    ]
    blocks: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(0, 9))):
        kind = draw(st.sampled_from(["data", "data", "del", "partial"] if allow_partial else ["data", "data", "del"]))
        n = draw(st.integers(1, 4))
        if kind == "del":
            versions = []
            for k in draw(st.lists(KEYS, min_size=1, max_size=n)):
                spec = draw(st.sampled_from(["null", "int0", "long"]))
                ts = None if spec == "null" else 0 if spec == "int0" else draw(st.integers(0, 4))
                versions.append(Version({KEY: k, "ts": ts}, True, True, spec != "long"))
            int0 = [v.ctd and v.data["ts"] == 0 for v in versions]
            if any(int0) and not all(int0):  # one Arrow type per block: an int 0 only in all-int blocks
                versions = [v for v, zero in zip(versions, int0, strict=True) if not zero]
            blocks.append((kind, versions))
            continue
        present = None
        if kind == "partial":
            present = frozenset([KEY, "ts", *draw(st.lists(st.sampled_from(["v1", "v2"]), unique=True))])
        versions = []
        for k in draw(st.lists(KEYS, min_size=1, max_size=n)):
            data = {
                KEY: k,
                "ts": draw(TS),
                "v1": draw(st.sampled_from([None, f"{k}x", f"{k}y"])),
                "v2": draw(st.one_of(st.none(), st.integers(0, 9))),
            }
            if present is not None:
                data = {c: data[c] for c in present}
            deleted = kind == "data" and allow_flagged and draw(st.booleans())
            versions.append(Version(data, deleted, False, deleted and data["ts"] is None, present))
        blocks.append((kind, versions))
    return base, blocks


def run(
    config: MergeConfig,
    base: list[dict[str, Any]],
    blocks: list[tuple[str, Any]],
    consolidate_after: Sequence[bool] = (),
) -> tuple[ReadRows, pa.Table]:
    delta = DeltaRecords(config, SCHEMA)
    for i, (kind, payload) in enumerate(to_blocks(blocks)):
        if kind == "del":
            delta.add_deletes(pa.array(payload[0]), payload[1])
        else:
            delta.add_data(payload, partial=kind == "partial")
        if i < len(consolidate_after) and consolidate_after[i]:
            len(delta)  # folds the pending blocks now
    base_table = pa.Table.from_pylist(base, schema=SCHEMA)
    merged = merge_file_slice(base_table.to_batches(max_chunksize=2) or None, delta, schema=SCHEMA)
    return by_key(merged), delta.to_table(include_deletes=True)


@pytest.fixture
def custom_config() -> Iterator[MergeConfig]:
    register_merger(COUNTING_MERGER_ID, CountingMerger())
    yield MergeConfig(MergeMode.CUSTOM, ("ts",), custom_merger=COUNTING_MERGER_ID)
    unregister_merger(COUNTING_MERGER_ID)


SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
MODEL_CONFIGS = [
    cfg(COMMIT),
    cfg(EVENT),
    cfg(EVENT, partial_update_mode=PartialUpdateMode.IGNORE_DEFAULTS),
    cfg(COMMIT, partial_update_mode=PartialUpdateMode.IGNORE_DEFAULTS),
]


# Rare by chance: a delete block with an ordering value right after a default-ordering delete is dropped.
CTD_THEN_ORDERED_DELETE: tuple[list[dict[str, Any]], list[tuple[str, Any]]] = (
    [],
    [
        ("data", [Version({KEY: "a", "ts": 3, "v1": "x", "v2": 1})]),
        ("del", [Version({KEY: "a", "ts": None}, True, True, True), Version({KEY: "a", "ts": 4}, True, True, False)]),
        ("data", [Version({KEY: "a", "ts": 1, "v1": "y", "v2": 2})]),
    ],
)


@pytest.mark.parametrize("config", MODEL_CONFIGS, ids=lambda c: f"{c.mode.value}-{c.partial_update_mode.value}")
@SETTINGS
@given(data=scenario(allow_partial=True, allow_flagged=True), splits=st.lists(st.booleans(), max_size=8))
@example(data=CTD_THEN_ORDERED_DELETE, splits=[])
@example(data=CTD_THEN_ORDERED_DELETE, splits=[True, True, True])
def test_matches_the_model(
    config: MergeConfig, data: tuple[list[dict[str, Any]], list[tuple[str, Any]]], splits: list[bool]
) -> None:
    base, blocks = data
    got, _ = run(config, base, blocks, splits)
    assert got == model_read(config, base, blocks)


@SETTINGS
@given(data=scenario(allow_partial=False, allow_flagged=False))
def test_custom_merger_matches_the_model(
    custom_config: MergeConfig, data: tuple[list[dict[str, Any]], list[tuple[str, Any]]]
) -> None:
    base, blocks = data
    got, _ = run(custom_config, base, blocks)
    assert got == model_read(custom_config, base, blocks)


@pytest.mark.parametrize("config", MODEL_CONFIGS[:3], ids=lambda c: f"{c.mode.value}-{c.partial_update_mode.value}")
@SETTINGS
@given(data=scenario(allow_partial=True, allow_flagged=True), splits=st.lists(st.booleans(), min_size=8, max_size=8))
def test_incremental_equals_one_shot(
    config: MergeConfig, data: tuple[list[dict[str, Any]], list[tuple[str, Any]]], splits: list[bool]
) -> None:
    base, blocks = data
    one_shot, one_delta = run(config, base, blocks)
    incremental, inc_delta = run(config, base, blocks, [True] * 8)
    random_split, _ = run(config, base, blocks, splits)
    assert one_shot == incremental == random_split
    assert by_key(one_delta) == by_key(inc_delta)
