"""Compaction planning: the real plans in the fixtures reproduced from the table state at scheduling time, the
trigger rules, strategies, preconditions and plan validation on tables written by our write client."""

from __future__ import annotations

import json
import zipfile
from datetime import UTC, datetime, timedelta
from io import BytesIO
from pathlib import Path
from zoneinfo import ZoneInfo

import fastavro
import pytest

from tableservice.errors import ConfigError, FileMissingError, InvalidPlanError, InvalidTimelineError
from tableservice.hudi.file_group.filenames import parse_base_file_name, parse_log_file_name
from tableservice.hudi.models import (
    HoodieClusteringGroup,
    HoodieClusteringPlan,
    HoodieCompactionOperation,
    HoodieCompactionPlan,
    HoodieSliceInfo,
    decode_compaction_plan,
    encode_clustering_plan,
    encode_compaction_plan,
)
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.fs_view import FileSystemView
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant, State
from tableservice.hudi.write.client import WriteClient
from tableservice.hudi.write.workload import Workload
from tableservice.planning import (
    CompactionBlockedError,
    CompactionPolicy,
    CompactionStrategyName,
    CompactionTableState,
    CompactionTriggerStrategy,
    compaction_due,
    plan_compaction,
    validate_compaction_plan,
)
from tableservice.planning.compaction.strategy import day_based_partitions, operation_metrics, order_and_filter
from tableservice.storage import Storage
from tests.support.fixtures import (
    REFERENCE_AVSC,
    fixture_archive,
    fixture_names,
    fixture_root,
    fixture_table_readonly,
)
from tests.support.trip_tables import create_trip_table

AVSC = REFERENCE_AVSC / "HoodieCompactionPlan__tv8-9.avsc"
UNBOUNDED = CompactionPolicy(strategy=CompactionStrategyName.UNBOUNDED)


# --- the table as it was just before an instant ----------------------------------------------------------------


def state_before(table: HudiTable, c: str) -> tuple[Timeline, FileSystemView]:
    """Timeline and view as a scheduler saw them at instant C: instants requested before C (those completed at or
    after C still pending) and no file written by an instant at or after C."""
    full = table.timeline()
    instants = []
    for i in full:
        if i.requested_time >= c:
            continue
        if i.is_completed and i.completion_time is not None and i.completion_time >= c:
            i = i.with_state(State.INFLIGHT)
        instants.append(i)
    timeline = Timeline(tuple(instants), full.layout_version, full.completed_mtimes)
    listing = {}
    for partition, files in table.list_data_files().items():
        kept = []
        for f in files:
            base = parse_base_file_name(f.name)
            log = parse_log_file_name(f.name) if f.name.startswith(".") else None
            t = base.instant_time if base else log.instant_time if log else None
            if t is None or t < c:
                kept.append(f)
        listing[partition] = kept
    return timeline, table.file_system_view(timeline=timeline, listing=listing)


# --- (a) real plans --------------------------------------------------------------------------------------------


def _compaction_cases() -> list[tuple[str, bool, str]]:
    """(fixture, in the metadata table?, instant) of every compaction instant in the fixture archives."""
    out = []
    for name in fixture_names():
        with zipfile.ZipFile(fixture_archive(name)[0]) as zf:
            for member in zf.namelist():
                if member.endswith(".compaction.requested") and "__MACOSX" not in member:
                    out.append((name, "/.hoodie/metadata/" in member, member.rsplit("/", 1)[1].split(".")[0]))
    return sorted(out)


CASES = _compaction_cases()
CASE_PARAMS = CASES or [("none", False, "")]


def _open(name: str, mdt: bool) -> HudiTable:
    path = fixture_table_readonly(name)
    return HudiTable.open(Storage(), str(path / ".hoodie" / "metadata" if mdt else path))


def test_fixture_compactions_found() -> None:
    fixture_root()
    data_cases = {(n, c) for n, mdt, c in CASES if not mdt}
    assert {
        ("quickstart_trips_table/mor/avro/v8_trips_8i3u1d", "20251220210129235"),
        ("sample_table/mor/avro/v9_txns_nonpart_nometa", "20260307135936824"),
        ("sample_table/mor/avro/v9_txns_simple_meta", "20260307162618152"),
    } <= data_cases
    assert len([c for c in CASES if c[1]]) >= 2


@pytest.mark.parametrize("case", CASE_PARAMS, ids=[f"{n}{'-mdt' if m else ''}" for n, m, _ in CASE_PARAMS])
def test_plan_reproduces_real_plan(case: tuple[str, bool, str]) -> None:
    name, mdt, c = case
    if name == "none":
        fixture_root()
        pytest.skip("no fixture holds a compaction")
    table = _open(name, mdt)
    real = table.compaction_plan(Instant(c, Action.COMPACTION, State.REQUESTED))
    timeline, view = state_before(table, c)
    # The metadata table compacts with UnBoundedCompactionStrategy; data tables used the default policy. The
    # writer's extra metadata (a Spark SQL flag in one table) is the caller's to pass.
    policy = UNBOUNDED if mdt else CompactionPolicy()
    ours = plan_compaction(table, c, policy, timeline=timeline, view=view, extra_metadata=real.extra_metadata or None)
    assert ours is not None
    assert real.operations is not None and ours.operations is not None
    if mdt:
        # Hudi lists metadata-table partitions in Java HashMap order: compare the operations as a set.
        by_fg = {(o.partition_path, o.file_id): o for o in ours.operations}
        assert by_fg == {(o.partition_path, o.file_id): o for o in real.operations}
    else:
        assert len(ours.operations) == len(real.operations)
        for o, r in zip(ours.operations, real.operations, strict=True):
            for field in HoodieCompactionOperation.model_fields:
                assert getattr(o, field) == getattr(r, field), (o.file_id, field)
            assert list((o.metrics or {}).items()) == list((r.metrics or {}).items())  # same key order too
    for field in ("extra_metadata", "version", "strategy", "preserve_hoodie_metadata", "missing_schedule_partitions"):
        assert getattr(ours, field) == getattr(real, field), field
    if not mdt:
        assert ours == real
        # Encoded with our writer schema, the plan decodes to the very record Hudi wrote.
        raw = (Path(table.active.path_of(Instant(c, Action.COMPACTION, State.REQUESTED)))).read_bytes()
        theirs = next(iter(fastavro.reader(BytesIO(raw))))
        mine = next(iter(fastavro.reader(BytesIO(encode_compaction_plan(ours, table_version=table.config.version)))))
        assert json.dumps(mine) == json.dumps(theirs)


@pytest.mark.parametrize("case", [c for c in CASES if not c[1]] or [("none", False, "")])
def test_real_plans_validate_against_the_table(case: tuple[str, bool, str]) -> None:
    name, _, c = case
    if name == "none":
        fixture_root()
        pytest.skip("no fixture holds a compaction")
    table = _open(name, False)
    instant = Instant(c, Action.COMPACTION, State.REQUESTED)
    real = table.compaction_plan(instant)
    timeline, _ = state_before(table, c)
    with_plan = Timeline((*timeline.instants, instant), timeline.layout_version)
    plan_file = table.active.path_of(instant)
    resolved = validate_compaction_plan(table, instant, real, plan_file=plan_file, timeline=with_plan)
    assert [(r.partition, r.file_id) for r in resolved] == [
        (o.partition_path, o.file_id) for o in real.operations or ()
    ]
    for r in resolved:
        op = r.operation
        assert r.base_instant_time == op.base_instant_time
        assert r.base_file is not None and op.data_file_path is not None
        assert Path(r.base_file).name == op.data_file_path and Path(r.base_file).is_file()
        assert [Path(p).name for p in r.log_files] == list(op.delta_file_paths or ())
        assert all(Path(p).parent == Path(r.base_file).parent for p in r.log_files)


@pytest.mark.parametrize(
    ("name", "mdt", "max_commits"),
    [
        ("quickstart_trips_table/mor/avro/v8_trips_8i3u1d", False, 5),
        ("sample_table/mor/avro/v9_txns_simple_meta", True, 10),
    ],
)
def test_trigger_fires_where_hudi_scheduled(name: str, mdt: bool, max_commits: int) -> None:
    """The quickstart writer compacts inline with the default 5 delta commits; the metadata table with its
    default of 10 (there while delta commit 20260307162612542 was still inflight: only completed ones count).
    Just before the real compaction the count reaches the threshold, one delta commit earlier it does not."""
    if name not in fixture_names():
        fixture_root()
        pytest.skip(f"{name} is absent")
    table = _open(name, mdt)
    c = next(i.requested_time for i in table.timeline() if i.action is Action.COMPACTION)
    policy = CompactionPolicy(max_delta_commits=max_commits)
    now = datetime(2030, 1, 1, tzinfo=UTC)
    timeline, _ = state_before(table, c)
    decision = compaction_due(CompactionTableState.of(table, timeline=timeline), policy, now)
    assert decision.due and decision.delta_commits == max_commits
    last_delta = [i for i in timeline if i.action is Action.DELTA_COMMIT and i.is_completed][-1]
    earlier, _ = state_before(table, last_delta.requested_time)
    decision = compaction_due(CompactionTableState.of(table, timeline=earlier), policy, now)
    assert not decision.due and decision.delta_commits == max_commits - 1


# --- write-client tables ---------------------------------------------------------------------------------------


def _mor_table(tmp_path: Path, version: int) -> tuple[Storage, str, WriteClient]:
    storage = Storage()
    path = str(tmp_path / f"t{version}")
    create_trip_table(path, version, TableType.MERGE_ON_READ, storage=storage)
    return storage, path, WriteClient(storage, path)


def _due(storage: Storage, path: str, policy: CompactionPolicy) -> tuple[bool, int]:
    table = HudiTable.open(storage, path)
    decision = compaction_due(CompactionTableState.of(table, policy), policy, datetime.now(UTC))
    return decision.due, decision.delta_commits


def _schedule(table: HudiTable, policy: CompactionPolicy) -> tuple[Instant, HoodieCompactionPlan]:
    timeline = table.reload()
    c = table.active.new_instant_time(timeline)
    plan = plan_compaction(table, c, policy, timeline=timeline)
    assert plan is not None
    content = encode_compaction_plan(plan, table_version=table.config.version)
    return table.active.create_requested(c, Action.COMPACTION, content), plan


@pytest.mark.parametrize("version", [6, 8, 9])
def test_write_client_table_triggers_plans_and_pending_compaction(tmp_path: Path, version: int) -> None:
    storage, path, client = _mor_table(tmp_path, version)
    policy = CompactionPolicy(max_delta_commits=3)
    after_request = policy.model_copy(
        update={"trigger_strategy": CompactionTriggerStrategy.NUM_COMMITS_AFTER_LAST_REQUEST}
    )
    steps = list(Workload(90, 3, update_fraction=0.4, partitions=3, seed=3).steps())
    seen = []
    for step in steps:
        client.apply(step)
        seen.append(_due(storage, path, policy))
    assert seen == [(False, 1), (False, 2), (True, 3)]

    table = HudiTable.open(storage, path)
    view = table.file_system_view()
    with_logs = {s.file_group_id: s for s in view.latest_slices() if s.log_files}
    c1, plan1 = _schedule(table, policy)
    ops = plan1.operations or ()
    assert {(o.partition_path, o.file_id) for o in ops} == set(with_logs)
    sizes = [(o.metrics or {})["TOTAL_LOG_FILES_SIZE"] for o in ops]
    assert sizes == sorted(sizes, reverse=True)
    for o in ops:
        s = with_logs[(o.partition_path or "", o.file_id or "")]
        assert o.base_instant_time == s.base_instant_time
        assert o.data_file_path == (s.base_file.file_name if s.base_file else None)
        assert o.delta_file_paths == tuple(lf.file_name for lf in s.log_files)
        assert o.metrics == operation_metrics(
            s.base_file.size if s.base_file else None, [lf.size for lf in s.log_files], policy.parquet_max_file_size
        )
    assert plan1.missing_schedule_partitions == (None if version == 6 else ())
    assert decode_compaction_plan(encode_compaction_plan(plan1, table_version=version), path="x") == plan1.model_copy(
        update={"missing_schedule_partitions": None} if version == 6 else {}
    )

    # A requested compaction: the request trigger starts counting again, NUM_COMMITS does not (no completed one).
    assert _due(storage, path, after_request) == (False, 0)
    assert _due(storage, path, policy) == (True, 3)

    # Updates to the compacted groups, then new file groups with logs of their own.
    client.apply(steps[1])
    fresh = list(Workload(30, 2, update_fraction=0.5, partitions=2, seed=8).steps())
    for step in fresh:
        client.apply(step)
    assert _due(storage, path, after_request) == (True, 3)
    table = HudiTable.open(storage, path)
    view = table.file_system_view()
    under_c1 = {fg for fg, t in view.inputs.pending_compaction.items() if t == c1.requested_time}
    assert under_c1 == set(with_logs)
    # The log-bytes trigger looks only at what a plan could take.
    assert CompactionTableState.of(table, view=view).log_bytes == sum(
        s.log_size for s in view.latest_slices() if s.file_group_id not in under_c1
    )
    _, plan2 = _schedule(table, policy)
    groups2 = {(o.partition_path or "", o.file_id or "") for o in plan2.operations or ()}
    assert groups2 and not groups2 & under_c1
    assert groups2 == {s.file_group_id for s in view.latest_slices() if s.log_files and s.file_group_id not in under_c1}

    # Both plans validate against the table; C1's log order and locations come back resolved.
    resolved = validate_compaction_plan(HudiTable.open(storage, path), c1, plan1, plan_file="c1.compaction.requested")
    assert [r.file_id for r in resolved] == [o.file_id for o in ops]
    assert all(Path(r.base_file or "").is_file() and all(Path(p).is_file() for p in r.log_files) for r in resolved)
    # The same plan under another compaction instant: its file groups belong to C1.
    c3 = Instant(table.active.new_instant_time(table.reload()), Action.COMPACTION, State.REQUESTED)
    with pytest.raises(InvalidPlanError, match=f"also under pending compaction {c1.requested_time}"):
        validate_compaction_plan(HudiTable.open(storage, path), c3, plan1, plan_file="c3.compaction.requested")


@pytest.mark.parametrize("version", [6, 8, 9])
def test_pending_clustering_and_pending_writes(tmp_path: Path, version: int) -> None:
    storage, path, client = _mor_table(tmp_path, version)
    for step in Workload(60, 2, update_fraction=0.5, partitions=2, seed=5).steps():
        client.apply(step)
    table = HudiTable.open(storage, path)
    view = table.file_system_view()
    target = next(s for s in view.latest_slices() if s.log_files)
    others = {s.file_group_id for s in view.latest_slices() if s.log_files} - {target.file_group_id}
    plan = HoodieClusteringPlan(
        input_groups=(
            HoodieClusteringGroup(
                slices=(HoodieSliceInfo(file_id=target.file_id, partition_path=target.partition_path),),
                metrics={},
            ),
        ),
        version=1,
    )
    timeline = table.reload()
    t = table.active.new_instant_time(timeline)
    action = Action.REPLACE_COMMIT if version == 6 else Action.CLUSTERING
    table.active.create_requested(t, action, encode_clustering_plan(plan, table_version=version))
    timeline = table.reload()
    c = table.active.new_instant_time(timeline)
    if version == 6:
        # Hudi 0.x: a pending replace commit (clustering) before C is a pending write: no compaction yet.
        with pytest.raises(CompactionBlockedError) as err:
            plan_compaction(table, c, CompactionPolicy(), timeline=timeline)
        assert err.value.blocking.requested_time == t and err.value.retryable
        return
    ours = plan_compaction(table, c, CompactionPolicy(), timeline=timeline)
    assert ours is not None
    assert {(o.partition_path, o.file_id) for o in ours.operations or ()} == others
    # A plan that names the clustered group is refused.
    bad = HoodieCompactionPlan(operations=(_op_of(target),), version=2)
    instant = Instant(c, Action.COMPACTION, State.REQUESTED)
    with pytest.raises(InvalidPlanError, match="pending clustering"):
        validate_compaction_plan(table, instant, bad, plan_file="p.requested", timeline=timeline)


def _op_of(slice_: object) -> HoodieCompactionOperation:
    from tableservice.hudi.table.fs_view import FileSlice

    assert isinstance(slice_, FileSlice)
    return HoodieCompactionOperation(
        base_instant_time=slice_.base_instant_time,
        delta_file_paths=tuple(lf.file_name for lf in slice_.log_files),
        data_file_path=slice_.base_file.file_name if slice_.base_file else None,
        file_id=slice_.file_id,
        partition_path=slice_.partition_path,
    )


@pytest.mark.parametrize("version", [6, 8, 9])
def test_pending_delta_commit_blocks_only_version_6(tmp_path: Path, version: int) -> None:
    storage, path, client = _mor_table(tmp_path, version)
    for step in Workload(40, 2, update_fraction=0.5, partitions=1, seed=2).steps():
        client.apply(step)
    table = HudiTable.open(storage, path)
    t = table.active.new_instant_time(table.reload())
    table.active.create_requested(t, Action.DELTA_COMMIT)
    timeline = table.reload()
    c = table.active.new_instant_time(timeline)
    if version == 6:
        with pytest.raises(CompactionBlockedError, match=t):
            plan_compaction(table, c, CompactionPolicy(), timeline=timeline)
    else:
        plan = plan_compaction(table, c, CompactionPolicy(), timeline=timeline)
        assert plan is not None and plan.operations
    with pytest.raises(InvalidTimelineError, match="not newer"):
        plan_compaction(table, t, CompactionPolicy(), timeline=timeline)


@pytest.mark.parametrize("version", [8, 9])
def test_logs_of_delta_commits_completed_after_c_stay_out(tmp_path: Path, version: int) -> None:
    storage, path, client = _mor_table(tmp_path, version)
    results = [client.apply(s) for s in Workload(40, 3, update_fraction=0.5, partitions=1, seed=4).steps()]
    table = HudiTable.open(storage, path)
    timeline = table.reload()
    c = table.active.new_instant_time(timeline)
    last = results[-1].instant_time
    # The last delta commit completes (in this timeline) after C: its log files are not C's to compact.
    late = Timeline(
        tuple(i if i.requested_time != last else i.with_state(State.COMPLETED, "29991231235959999") for i in timeline),
        timeline.layout_version,
    )
    plan = plan_compaction(table, c, UNBOUNDED, timeline=late)
    assert plan is not None
    named = {n for o in plan.operations or () for n in o.delta_file_paths or ()}
    assert named and all(parse_log_file_name(n).instant_time != last for n in named)  # type: ignore[union-attr]
    full = plan_compaction(table, c, UNBOUNDED, timeline=timeline)
    assert full is not None
    assert any(n.split("_")[1].startswith(last) for o in full.operations or () for n in o.delta_file_paths or ())


@pytest.mark.parametrize("version", [6, 8])
def test_strategies_on_a_written_table(tmp_path: Path, version: int) -> None:
    storage, path, client = _mor_table(tmp_path, version)
    for step in Workload(120, 3, update_fraction=0.3, partitions=3, seed=9).steps():
        client.apply(step)
    table = HudiTable.open(storage, path)
    c = table.active.new_instant_time(table.reload())
    unbounded = plan_compaction(table, c, UNBOUNDED)
    by_size = plan_compaction(table, c, CompactionPolicy())
    assert unbounded is not None and by_size is not None
    keys = [(o.partition_path, o.file_id) for o in unbounded.operations or ()]
    assert keys == sorted(keys) and len(keys) >= 3
    sizes = [int((o.metrics or {})["TOTAL_LOG_FILES_SIZE"]) for o in by_size.operations or ()]
    assert sizes == sorted(sizes, reverse=True)
    assert sorted(by_size.operations or (), key=lambda o: (o.partition_path, o.file_id)) == list(
        unbounded.operations or ()
    )
    # A log-size threshold between the sizes keeps the larger slices; their partitions are "missing" in 8/9.
    cut = sizes[len(sizes) // 2]
    big = plan_compaction(table, c, CompactionPolicy(log_file_size_threshold=cut))
    assert big is not None
    dropped = [o for o in by_size.operations or () if int((o.metrics or {})["TOTAL_LOG_FILES_SIZE"]) < cut]
    assert [o.file_id for o in big.operations or ()] == [
        o.file_id for o in by_size.operations or () if o not in dropped
    ]
    if version == 6:
        assert big.missing_schedule_partitions is None
    else:
        assert big.missing_schedule_partitions == tuple(dict.fromkeys(o.partition_path or "" for o in dropped))
    assert plan_compaction(table, c, CompactionPolicy(log_file_size_threshold=10**12)) is None


# --- strategies on synthetic operations ------------------------------------------------------------------------


def _synthetic(partition: str, fid: str, log_bytes: int, base_bytes: int | None) -> HoodieCompactionOperation:
    return HoodieCompactionOperation(
        base_instant_time="20240101000000000",
        file_id=fid,
        partition_path=partition,
        metrics=operation_metrics(base_bytes, [log_bytes], 120 * 1024 * 1024),
    )


def test_metrics_follow_hudi() -> None:
    mb = 1024 * 1024
    assert operation_metrics(None, [10, 20], 120 * mb) == {
        "TOTAL_LOG_FILES": 2.0,
        "TOTAL_IO_MB": 120.0,
        "TOTAL_IO_READ_MB": 0.0,
        "TOTAL_LOG_FILES_SIZE": 30.0,
        "TOTAL_IO_WRITE_MB": 120.0,
    }
    m = operation_metrics(300 * mb, [mb + 5, 2 * mb], 120 * mb)
    assert (m["TOTAL_IO_READ_MB"], m["TOTAL_IO_WRITE_MB"], m["TOTAL_IO_MB"]) == (303.0, 300.0, 603.0)
    assert operation_metrics(0, [1], 64 * mb)["TOTAL_IO_WRITE_MB"] == 64.0  # an empty base counts as absent


def test_io_bound_takes_the_operation_that_crosses_it() -> None:
    ops = [_synthetic("a", "f1", 100, None), _synthetic("b", "f2", 300, None), _synthetic("c", "f3", 200, None)]
    # each operation: 120 MB write, 0 MB read
    policy = CompactionPolicy(target_io_mb=200)
    v8 = order_and_filter(ops, policy, 8)
    assert [o.file_id for o in v8.operations] == ["f2", "f3"] and v8.missing_partitions == ["a"]
    v6 = order_and_filter(ops, policy, 6)
    assert [o.file_id for o in v6.operations] == ["f2", "f3"]
    assert [o.file_id for o in order_and_filter(ops, CompactionPolicy(target_io_mb=0), 6).operations] == ["f2"]
    assert order_and_filter(ops, CompactionPolicy(target_io_mb=0), 8).operations == []
    assert [o.file_id for o in order_and_filter(ops, CompactionPolicy(target_io_mb=240), 8).operations] == ["f2", "f3"]
    assert [o.file_id for o in order_and_filter(ops, CompactionPolicy(target_io_mb=241), 8).operations] == [
        "f2",
        "f3",
        "f1",
    ]
    tie = [_synthetic("a", "x", 5, 1), _synthetic("a", "y", 5, 1), _synthetic("b", "z", 6, 1)]
    assert [o.file_id for o in order_and_filter(tie, CompactionPolicy(), 9).operations] == ["z", "x", "y"]
    assert [o.file_id for o in order_and_filter(ops, UNBOUNDED, 9).operations] == ["f1", "f2", "f3"]


def test_day_based_takes_the_newest_partitions() -> None:
    policy = CompactionPolicy.from_mapping(
        {
            "hoodie.compaction.strategy": "DayBasedCompactionStrategy",
            "hoodie.compaction.daybased.target.partitions": "2",
        }
    )
    ops = [
        _synthetic("2024/01/01", "a", 1, 1),
        _synthetic("year=2024/month=01/day=03", "b", 1, 1),
        _synthetic("2024/01/02", "c", 1, 1),
        _synthetic("2024/01/02", "d", 1, 1),
    ]
    result = order_and_filter(ops, policy, 9)
    assert [o.file_id for o in result.operations] == ["b", "c", "d"]
    assert result.missing_partitions == ["2024/01/01"]
    assert day_based_partitions(["2023/12/31", "2024/01/02", "2024/01/01"], policy) == (
        ["2024/01/02", "2024/01/01"],
        ["2023/12/31"],
    )
    with pytest.raises(ConfigError, match="city=lima"):
        order_and_filter([_synthetic("city=lima", "e", 1, 1)], policy, 9)


# --- triggers on synthetic timelines ---------------------------------------------------------------------------


def _tl(layout: int, *entries: tuple[str, Action, State, str | None]) -> Timeline:
    return Timeline(tuple(sorted(Instant(t, a, s, c) for t, a, s, c in entries)), layout)


def _state(timeline: Timeline, version: int, tz: str = "UTC", log_bytes: int | None = None) -> CompactionTableState:
    return CompactionTableState("t", version, True, timeline, ZoneInfo(tz), log_bytes)


D, C, R = Action.DELTA_COMMIT, Action.COMPACTION, Action.REPLACE_COMMIT
DONE, RUNNING, ASKED = State.COMPLETED, State.INFLIGHT, State.REQUESTED
NOW = datetime(2024, 1, 1, 12, tzinfo=UTC)


def test_counting_differs_by_table_version() -> None:
    entries = [
        ("20240101000000000", D, DONE, "20240101000000100"),
        ("20240101000000500", D, DONE, "20240101000002000"),  # requested before the compaction, completed after it
        ("20240101000001000", C, DONE, "20240101000001500"),
        ("20240101000003000", D, DONE, "20240101000003100"),
        ("20240101000004000", R, DONE, "20240101000004100"),  # an insert overwrite is no compaction
        ("20240101000005000", D, RUNNING, None),
        ("20240101000006000", D, ASKED, None),
    ]
    v8 = compaction_due(_state(_tl(2, *entries), 8), CompactionPolicy(max_delta_commits=2), NOW)
    assert (v8.due, v8.delta_commits) == (True, 2)  # 0500 (completed after C was requested) and 3000
    v6_entries = [(t, a, s, None) for t, a, s, _ in entries]
    v6 = compaction_due(_state(_tl(1, *v6_entries), 6), CompactionPolicy(max_delta_commits=4), NOW)
    assert (v6.due, v6.delta_commits) == (False, 3)  # 3000, 5000 and 6000: any state, requested after C
    assert "last compaction 20240101000001000" in v6.reason
    req = CompactionPolicy.model_validate(
        {"hoodie.compact.inline.trigger.strategy": "num_commits_after_last_request", "max_delta_commits": 2}
    )
    pending = [*entries, ("20240101000007000", C, ASKED, None), ("20240101000008000", D, RUNNING, None)]
    decision = compaction_due(_state(_tl(2, *pending), 8), req, NOW)
    assert (decision.due, decision.delta_commits) == (False, 1)
    assert compaction_due(_state(_tl(2), 8), CompactionPolicy(), NOW).reason == "not due: no delta commits yet"


def test_time_triggers_use_whole_seconds_in_the_table_time_zone() -> None:
    tl = _tl(2, ("20240101000000500", D, DONE, "20240101000001000"))
    policy = CompactionPolicy(trigger_strategy=CompactionTriggerStrategy.TIME_ELAPSED, max_delta_seconds=3600)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    # Hudi compares whole seconds of both instants: 00:00:00.500 → 01:00:00.400 is 3600 s.
    at = compaction_due(_state(tl, 9), policy, start + timedelta(hours=1, milliseconds=400))
    assert at.due and at.seconds_since == pytest.approx(3599.9)
    assert not compaction_due(_state(tl, 9), policy, start + timedelta(seconds=3599, milliseconds=999)).due
    # The same instant time read in Kolkata (UTC+5:30) is 18:30 UTC the day before.
    kolkata = compaction_due(_state(tl, 9, "Asia/Kolkata"), policy, start - timedelta(hours=4, minutes=30))
    assert kolkata.due and kolkata.seconds_since == pytest.approx(3599.5)
    both = policy.model_copy(
        update={"trigger_strategy": CompactionTriggerStrategy.NUM_AND_TIME, "max_delta_commits": 2}
    )
    either = both.model_copy(update={"trigger_strategy": CompactionTriggerStrategy.NUM_OR_TIME})
    later = start + timedelta(hours=2)
    assert not compaction_due(_state(tl, 9), both, later).due
    assert compaction_due(_state(tl, 9), either, later).due
    assert not compaction_due(_state(tl, 9), either, start + timedelta(minutes=5)).due


def test_next_due_moment_of_time_triggers() -> None:
    """When the time trigger next fires: the reference instant's whole second plus max.delta.seconds, read in the
    table's zone; none while due, for commit-count triggers, or for NUM_AND_TIME before the count is reached."""
    tl = _tl(2, ("20240101000000500", D, DONE, "20240101000001000"))
    policy = CompactionPolicy(trigger_strategy=CompactionTriggerStrategy.TIME_ELAPSED, max_delta_seconds=3600)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    early = compaction_due(_state(tl, 9), policy, start + timedelta(minutes=10))
    assert (early.due, early.next_due_at) == (False, datetime(2024, 1, 1, 1, tzinfo=UTC))
    kolkata = compaction_due(_state(tl, 9, "Asia/Kolkata"), policy, start - timedelta(hours=5))
    assert kolkata.next_due_at == datetime(2023, 12, 31, 19, 30, tzinfo=UTC)
    assert compaction_due(_state(tl, 9), policy, start + timedelta(hours=2)).next_due_at is None  # due now
    either = policy.model_copy(update={"trigger_strategy": CompactionTriggerStrategy.NUM_OR_TIME})
    assert compaction_due(_state(tl, 9), either, start).next_due_at == datetime(2024, 1, 1, 1, tzinfo=UTC)
    both = policy.model_copy(
        update={"trigger_strategy": CompactionTriggerStrategy.NUM_AND_TIME, "max_delta_commits": 2}
    )
    assert compaction_due(_state(tl, 9), both, start).next_due_at is None  # waits on a second delta commit
    one = both.model_copy(update={"max_delta_commits": 1})
    assert compaction_due(_state(tl, 9), one, start).next_due_at == datetime(2024, 1, 1, 1, tzinfo=UTC)
    counts = CompactionPolicy(max_delta_commits=5)
    assert compaction_due(_state(tl, 9), counts, start).next_due_at is None


def test_log_bytes_disabled_and_guards() -> None:
    tl = _tl(2, ("20240101000000000", D, DONE, "20240101000000100"))
    policy = CompactionPolicy.from_mapping({"tableservice.compaction.log.bytes.threshold": "1000"})
    assert compaction_due(_state(tl, 9, log_bytes=1000), policy, NOW).due
    decision = compaction_due(_state(tl, 9, log_bytes=999), policy, NOW)
    assert (decision.due, decision.log_bytes) == (False, 999)
    off = CompactionPolicy(enabled=False, max_delta_commits=1)
    decision = compaction_due(_state(tl, 9), off, NOW)
    assert not decision.due and decision.delta_commits == 1 and "disabled" in decision.reason
    with pytest.raises(ValueError, match="log-bytes"):
        compaction_due(_state(tl, 9), policy, NOW)
    with pytest.raises(ValueError, match="timezone"):
        compaction_due(_state(tl, 9), CompactionPolicy(), datetime(2024, 1, 1))
    cow = CompactionTableState("t", 9, False, tl, UTC)
    assert compaction_due(cow, CompactionPolicy(max_delta_commits=0), NOW).reason == "not a merge-on-read table"


def test_log_bytes_measured_on_a_written_table(tmp_path: Path) -> None:
    storage, path, client = _mor_table(tmp_path, 9)
    for step in Workload(40, 2, update_fraction=0.5, partitions=2, seed=6).steps():
        client.apply(step)
    table = HudiTable.open(storage, path)
    logs = sum(s.log_size for s in table.file_system_view().latest_slices())
    policy = CompactionPolicy(max_delta_commits=100, log_bytes_threshold=logs)
    decision = compaction_due(CompactionTableState.of(table, policy), policy, datetime.now(UTC))
    assert decision.due and decision.log_bytes == logs > 0
    stricter = policy.model_copy(update={"log_bytes_threshold": logs + 1})
    assert not compaction_due(CompactionTableState.of(table, stricter), stricter, datetime.now(UTC)).due


# --- policy --------------------------------------------------------------------------------------------------


def test_policy_defaults_keys_and_errors() -> None:
    p = CompactionPolicy()
    assert p.to_mapping() == {
        "tableservice.compaction.enabled": "true",
        "hoodie.compact.inline.trigger.strategy": "NUM_COMMITS",
        "hoodie.compact.inline.max.delta.commits": "5",
        "hoodie.compact.inline.max.delta.seconds": "3600",
        "hoodie.compaction.strategy": CompactionStrategyName.LOG_FILE_SIZE_BASED.value,
        "hoodie.compaction.target.io": "512000",
        "hoodie.compaction.logfile.size.threshold": "0",
        "hoodie.compaction.daybased.target.partitions": "10",
        "hoodie.parquet.max.file.size": "125829120",
        "hoodie.memory.compaction.fraction": "0.6",
    }
    assert CompactionPolicy.from_mapping(p.to_mapping()) == p
    q = CompactionPolicy.from_mapping(
        {
            "hoodie.compact.inline.max.delta.commits": "7",
            "hoodie.compaction.strategy": "org.apache.hudi.table.action.compact.strategy.UnBoundedCompactionStrategy",
            "tableservice.compaction.enabled": "false",
            "hoodie.cleaner.policy": "KEEP_LATEST_COMMITS",  # not ours: ignored
        }
    )
    assert (q.max_delta_commits, q.strategy, q.enabled) == (7, CompactionStrategyName.UNBOUNDED, False)
    assert (
        CompactionPolicy.model_validate({"hoodie.compaction.strategy": "unboundedcompactionstrategy"}).strategy
        is CompactionStrategyName.UNBOUNDED
    )
    with pytest.raises(ConfigError, match=r"hoodie.compact.inline.max.delta.commits='-1'"):
        CompactionPolicy.from_mapping({"hoodie.compact.inline.max.delta.commits": "-1"})
    with pytest.raises(ConfigError, match=r"hoodie.compaction.strategy='BoundedIOCompactionStrategy'"):
        CompactionPolicy.from_mapping({"hoodie.compaction.strategy": "BoundedIOCompactionStrategy"})
    with pytest.raises(ConfigError, match=r"hoodie.compact.inline.trigger.strategy='EVERY_TIME'"):
        CompactionPolicy.from_mapping({"hoodie.compact.inline.trigger.strategy": "EVERY_TIME"})
    with pytest.raises(ConfigError, match=r"hoodie.compaction.targetio='1'"):
        CompactionPolicy.from_mapping({"hoodie.compaction.targetio": "1"}, strict=True)
    assert (
        CompactionPolicy.from_mapping({"tableservice.compaction.log.bytes.threshold": "off"}).log_bytes_threshold
        is None
    )


def test_policy_memory_keys_are_checked() -> None:
    memory = CompactionPolicy.from_mapping(
        {"hoodie.memory.compaction.max.size": "268435456", "hoodie.memory.compaction.fraction": "0.25"}
    )
    assert (memory.memory_max_size, memory.memory_fraction) == (268_435_456, 0.25)
    assert CompactionPolicy().memory_max_size is None
    bad = [
        ("hoodie.memory.compaction.max.size", "0"),
        ("hoodie.memory.compaction.max.size", str((1 << 40) + 1)),
        ("hoodie.memory.compaction.max.size", "2.5"),
        ("hoodie.memory.compaction.fraction", "0"),
        ("hoodie.memory.compaction.fraction", "1.5"),
        ("hoodie.memory.compaction.fraction", "nan"),
    ]
    for key, value in bad:
        with pytest.raises(ConfigError, match=rf"{key}='{value}'"):
            CompactionPolicy.from_mapping({key: value})


# --- (c) validation --------------------------------------------------------------------------------------------


def test_validation_rejects_bad_plans(tmp_path: Path) -> None:
    storage, path, client = _mor_table(tmp_path, 9)
    for step in Workload(40, 2, update_fraction=0.5, partitions=1, seed=1).steps():
        client.apply(step)
    table = HudiTable.open(storage, path)
    instant, plan = _schedule(table, CompactionPolicy())
    table = HudiTable.open(storage, path)
    plan_file = table.active.path_of(instant)
    assert len(validate_compaction_plan(table, instant, plan, plan_file=plan_file)) == len(plan.operations or ())
    op = (plan.operations or ())[0]

    def check(error: type[Exception], bad_op: HoodieCompactionOperation, value: str) -> None:
        bad = plan.model_copy(update={"operations": (bad_op,)})
        with pytest.raises(error) as err:
            validate_compaction_plan(table, instant, bad, plan_file=plan_file)
        assert plan_file in str(err.value) and value in str(err.value)

    escape = "../../../../etc/passwd"
    check(InvalidPlanError, op.model_copy(update={"delta_file_paths": (escape,)}), escape)
    check(InvalidPlanError, op.model_copy(update={"partition_path": "../elsewhere"}), "../elsewhere")
    check(InvalidPlanError, op.model_copy(update={"data_file_path": "/etc/passwd"}), "/etc/passwd")
    check(InvalidPlanError, op.model_copy(update={"file_id": "no-such-group-0"}), "no-such-group-0")
    missing_log = f".{op.file_id}_20240101000000000.log.1_0-1-0"
    check(FileMissingError, op.model_copy(update={"delta_file_paths": (missing_log,)}), missing_log)
    check(InvalidPlanError, op.model_copy(update={"base_instant_time": "20200101000000000"}), "20200101000000000")
    check(InvalidPlanError, op.model_copy(update={"file_id": None}), "fileId")
    twice = plan.model_copy(update={"operations": (op, op)})
    with pytest.raises(InvalidPlanError, match="appears twice"):
        validate_compaction_plan(table, instant, twice, plan_file=plan_file)


# --- (d) encoding --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [8, 9])
def test_plan_decodes_with_hudi_writer_schema(tmp_path: Path, version: int) -> None:
    storage, path, client = _mor_table(tmp_path, version)
    for step in Workload(40, 2, update_fraction=0.5, partitions=2, seed=12).steps():
        client.apply(step)
    table = HudiTable.open(storage, path)
    plan = plan_compaction(table, table.active.new_instant_time(table.reload()), CompactionPolicy())
    assert plan is not None
    data = encode_compaction_plan(plan, table_version=version)
    reader_schema = fastavro.parse_schema(json.loads(AVSC.read_text()))
    records = list(fastavro.reader(BytesIO(data), reader_schema=reader_schema))
    assert records == [plan.to_avro()]
    assert decode_compaction_plan(data, path="plan") == plan
