"""Clustering planning: the real plans in the fixtures reproduced from the table state at scheduling time, the
policy keys, the trigger, grouping rules, exclusions, partition filters, incremental partitions, the requested
file and plan validation on tables written by our write client."""

from __future__ import annotations

import json
import math
import shutil
import zipfile
from io import BytesIO
from pathlib import Path
from typing import Any

import fastavro
import pytest

from tableservice.errors import ConfigError, FileMissingError, InvalidPlanError, InvalidTimelineError
from tableservice.hudi.file_group.filenames import parse_base_file_name, parse_log_file_name
from tableservice.hudi.models import (
    HoodieClusteringPlan,
    HoodieReplaceCommitMetadata,
    decode_requested_replace_metadata,
    encode_compaction_plan,
    encode_replace_commit_metadata,
)
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.fs_view import FileSystemView
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.schema import avro_schema_from_arrow
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant, State
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.create import TableSpec, create_table
from tableservice.hudi.write.workload import TRIP_SCHEMA, Workload, WorkloadStep
from tableservice.planning import CompactionPolicy, CompactionStrategyName, plan_compaction
from tableservice.planning.clustering.groups import group_metrics, slice_size
from tableservice.planning.clustering.plan import (
    ClusteringPolicy,
    clustering_action,
    clustering_due,
    commits_since_last_clustering,
    encode_requested_clustering,
    plan_clustering,
    plan_partitions,
    requested_replace_metadata,
    validate_clustering_plan,
)
from tableservice.planning.clustering.trigger import java_hash_set_order
from tableservice.storage import Storage
from tests.support.fixtures import (
    REFERENCE_AVSC,
    fixture_archive,
    fixture_names,
    fixture_root,
    fixture_table_readonly,
)

AVSC = REFERENCE_AVSC
SORT_KEY = "hoodie.clustering.plan.strategy.sort.columns"
EXECUTION = "org.apache.hudi.client.clustering.run.strategy.SparkSortAndSizeExecutionStrategy"


def state_before(table: HudiTable, c: str) -> tuple[Timeline, FileSystemView]:
    """Timeline and view as a scheduler saw them at instant C (instants completed at or after C still pending,
    no file written by an instant at or after C)."""
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
        keep = []
        for f in files:
            base = parse_base_file_name(f.name)
            log = parse_log_file_name(f.name) if f.name.startswith(".") else None
            t = base.instant_time if base else log.instant_time if log else None
            if t is None or t < c:
                keep.append(f)
        listing[partition] = keep
    return timeline, table.file_system_view(timeline=timeline, listing=listing)


def _avsc(version: int) -> Any:
    name = "tv6" if version < 8 else "tv8-9"
    return fastavro.parse_schema(json.loads((AVSC / f"HoodieRequestedReplaceMetadata__{name}.avsc").read_text()))


def _records(data: bytes, schema: Any = None) -> list[Any]:
    return list(fastavro.reader(BytesIO(data), reader_schema=schema))


# --- (a) real plans --------------------------------------------------------------------------------------------


def _clustering_cases() -> list[tuple[str, str]]:
    """(fixture, instant) of every requested clustering in the fixture archives (v6: replace commits whose
    requested metadata holds a clustering plan; insert overwrites do not)."""
    out = []
    for name in fixture_names():
        with zipfile.ZipFile(fixture_archive(name)[0]) as zf:
            for member in zf.namelist():
                if "__MACOSX" in member or "/.hoodie/metadata/" in member:
                    continue
                if member.endswith((".clustering.requested", ".replacecommit.requested")):
                    md = decode_requested_replace_metadata(zf.read(member), path=member)
                    if md.is_clustering:
                        out.append((name, member.rsplit("/", 1)[1].split(".")[0]))
    return sorted(out)


def _real(name: str, c: str) -> tuple[HudiTable, Instant, HoodieClusteringPlan]:
    table = HudiTable.open(Storage(), str(fixture_table_readonly(name)))
    action = Action.CLUSTERING if table.config.version >= 8 else Action.REPLACE_COMMIT
    instant = Instant(c, action, State.REQUESTED)
    return table, instant, table.clustering_plan(instant)


CASES = _clustering_cases() or [("none", "")]


def _writer_base(plan: HoodieClusteringPlan) -> str:
    """The base path the writer's plan names (`file:/tmp/v9-gen/warehouse/<table>`)."""
    s = (plan.input_groups or ())[0].slices[0]  # type: ignore[index]
    path = s.data_file_path or ""
    tail = "/" + (f"{s.partition_path}/" if s.partition_path else "") + path.rsplit("/", 1)[1]
    return path[: -len(tail)]


def test_fixture_clusterings_found() -> None:
    fixture_root()
    assert {
        ("sample_table/cow/v9_txns_complex_nometa", "20260307135736981"),
        ("sample_table/mor/avro/v9_txns_nonpart_nometa", "20260307135937430"),
        ("sample_table/mor/avro/v9_txns_simple_meta", "20260307162619269"),
    } <= set(CASES)


@pytest.mark.parametrize("case", CASES, ids=[n for n, _ in CASES])
def test_plan_reproduces_real_plan(case: tuple[str, str]) -> None:
    if case[0] == "none":
        fixture_root()
        pytest.skip("no fixture holds a clustering")
    table, instant, real = _real(*case)
    timeline, view = state_before(table, instant.requested_time)
    ours = plan_clustering(table, instant.requested_time, ClusteringPolicy(), timeline=timeline, view=view)
    assert ours is not None
    # Same plan once our absolute paths name the writer's base path.
    moved = ours.model_dump_json(by_alias=True).replace("file:" + table.base_path, _writer_base(real))
    assert HoodieClusteringPlan.model_validate_json(moved) == real
    for mine, theirs in zip(ours.input_groups or (), real.input_groups or (), strict=True):
        assert list((mine.metrics or {}).items()) == list((theirs.metrics or {}).items())  # key order too
    # The requested file: our bytes decode to the very record Hudi wrote, with our schema and the reference one.
    raw = Path(table.active.path_of(instant)).read_bytes()
    data = encode_requested_clustering(
        HoodieClusteringPlan.model_validate_json(moved), table_version=table.config.version
    )
    assert json.dumps(_records(data)) == json.dumps(_records(raw))
    assert _records(data, _avsc(table.config.version)) == _records(raw)
    md = table.requested_replace_metadata(instant)
    assert md == requested_replace_metadata(real) and md.operation_type == "CLUSTER" and md.extra_metadata == {}
    assert clustering_action(table.config.version) is instant.action


@pytest.mark.parametrize("case", CASES, ids=[n for n, _ in CASES])
def test_real_plans_validate_and_paths_stay_inside(case: tuple[str, str], tmp_path: Path) -> None:
    if case[0] == "none":
        fixture_root()
        pytest.skip("no fixture holds a clustering")
    _, instant, real = _real(*case)
    # The plan names the writer's folder; a copy under that folder name maps its paths onto ours.
    dest = tmp_path / _writer_base(real).rsplit("/", 1)[1]
    shutil.copytree(fixture_table_readonly(case[0]), dest)
    table = HudiTable.open(Storage(), str(dest))
    timeline, _ = state_before(table, instant.requested_time)
    with_plan = Timeline((*timeline.instants, instant), timeline.layout_version)
    plan_file = table.active.path_of(instant)
    groups = validate_clustering_plan(table, instant, real, plan_file=plan_file, timeline=with_plan)
    assert [g.num_output_file_groups for g in groups] == [g.num_output_file_groups for g in real.input_groups or ()]
    for g, rg in zip(groups, real.input_groups or (), strict=True):
        assert [s.file_id for s in g.slices] == [s.file_id for s in rg.slices or ()]
        for s, rs in zip(g.slices, rg.slices or (), strict=True):
            assert s.base_file is not None and Path(s.base_file).is_file()
            assert Path(s.base_file).name == (rs.data_file_path or "").rsplit("/", 1)[1]
            assert Path(s.base_file).parent == dest / rg.slices[0].partition_path  # type: ignore[index, operator]
            assert s.base_instant_time == parse_base_file_name(Path(s.base_file).name).instant_time  # type: ignore[union-attr]
        assert g.input_bytes == sum(Path(s.base_file or "").stat().st_size for s in g.slices)
    first = (real.input_groups or ())[0].slices[0]  # type: ignore[index]
    writer = _writer_base(real)
    for bad in (
        "file:/etc/passwd",
        f"{writer}/../../../../etc/passwd",
        "s3://elsewhere/data/x.parquet",
        f"{writer}/nowhere/{(first.data_file_path or '').rsplit('/', 1)[1]}",
    ):
        evil = _replace_first_slice(real, data_file_path=bad)
        with pytest.raises(InvalidPlanError) as err:
            validate_clustering_plan(table, instant, evil, plan_file=plan_file, timeline=with_plan)
        assert err.value.path == plan_file


def _replace_first_slice(plan: HoodieClusteringPlan, **update: object) -> HoodieClusteringPlan:
    groups = list(plan.input_groups or ())
    slices = list(groups[0].slices or ())
    slices[0] = slices[0].model_copy(update=update)
    groups[0] = groups[0].model_copy(update={"slices": tuple(slices)})
    return plan.model_copy(update={"input_groups": tuple(groups)})


def _only_first_slice(plan: HoodieClusteringPlan, **update: object) -> HoodieClusteringPlan:
    g0 = (plan.input_groups or ())[0]
    first = (g0.slices or ())[0].model_copy(update=update)
    return plan.model_copy(update={"input_groups": (g0.model_copy(update={"slices": (first,)}),)})


def test_trigger_on_a_real_timeline() -> None:
    name = "sample_table/cow/v9_txns_complex_nometa"
    if name not in fixture_names():
        fixture_root()
        pytest.skip(f"{name} is absent")
    table = HudiTable.open(Storage(), str(fixture_table_readonly(name)))
    c = "20260307135736981"
    before, _ = state_before(table, c)
    # Nine commits and one insert overwrite (a replace commit that is no clustering) before the first clustering.
    assert commits_since_last_clustering(table, before) == (10, None)
    assert clustering_due(table, before, ClusteringPolicy(enabled=True)) == (
        True,
        "due: 10 completed commits and no clustering yet (threshold 4)",
    )
    count, last = commits_since_last_clustering(table)
    assert count == 1 and last is not None and last.requested_time == c
    due, why = clustering_due(table, None, ClusteringPolicy(enabled=True, async_max_commits=2))
    assert not due and why == f"not due: 1 completed commits since the last clustering {c} (threshold 2)"
    assert clustering_due(table, None, ClusteringPolicy(async_max_commits=1))[0] is False  # disabled


# --- (b) policy ------------------------------------------------------------------------------------------------


def test_policy_keys_defaults_and_values() -> None:
    p = ClusteringPolicy()
    assert (p.small_file_limit, p.max_bytes_per_group, p.max_num_groups, p.target_file_max_bytes) == (
        300 * 1024**2,
        2 * 1024**3,
        30,
        1024**3,
    )
    assert (p.max_commits, p.enabled, p.single_group_clustering_enabled, p.incremental) == (4, False, True, True)
    assert p.execution_strategy_class == EXECUTION and p.sort_column_names == ()
    q = ClusteringPolicy.from_mapping(
        {
            "tableservice.clustering.enabled": "true",
            "hoodie.clustering.plan.strategy.small.file.limit": "1048576",
            SORT_KEY: " fare , rider,",
            "hoodie.layout.optimize.strategy": "ZORDER",
            "hoodie.clustering.plan.partition.filter.mode": "selected_partitions",
            "hoodie.clustering.plan.strategy.partition.selected": "city=a, city=b",
            "hoodie.clustering.execution.strategy.class": "SparkSortAndSizeExecutionStrategy",
            "hoodie.clustering.inline": "true",  # known to Hudi, no effect on plans
            "hoodie.datasource.write.recordkey.field": "uuid",  # another service's key
        },
        strict=True,
    )
    assert q.enabled and q.small_file_limit == 1048576 and q.sort_columns == "fare,rider"
    assert q.sort_column_names == ("fare", "rider") and q.layout_strategy == "z-order"
    assert q.selected_partitions == ("city=a", "city=b") and q.execution_strategy_class == EXECUTION
    assert ClusteringPolicy.from_mapping(q.to_mapping()) == q
    # The configuration layer's round trip: dump by alias (JSON mode) and validate again.
    assert ClusteringPolicy.model_validate(q.model_dump(mode="json", by_alias=True, exclude_unset=True)) == q
    assert ClusteringPolicy.keys()["hoodie.clustering.plan.strategy.max.num.groups"] == "max_num_groups"
    # Which max-commits key counts: async when set, else inline when set.
    assert ClusteringPolicy.from_mapping({"hoodie.clustering.inline.max.commits": "2"}).max_commits == 2
    both = {"hoodie.clustering.inline.max.commits": 2, "hoodie.clustering.async.max.commits": 6}
    assert ClusteringPolicy.from_mapping(both).max_commits == 6
    for key, value, message in (
        ("hoodie.layout.optimize.strategy", "hilbert", "hilbert layout is not supported"),
        ("hoodie.clustering.plan.partition.filter.mode", "RECENT_DAYS", "RECENT_DAYS is not supported"),
        ("hoodie.clustering.plan.partition.filter.mode", "DAY_ROLLING", "DAY_ROLLING is not supported"),
        ("hoodie.clustering.plan.strategy.partition.regex.pattern", "city=(", "not a regular expression"),
        ("hoodie.clustering.execution.strategy.class", "SparkConsistentBucketClusteringExecutionStrategy", "not su"),
        ("hoodie.clustering.plan.strategy.max.num.groups", "0", "greater than or equal to 1"),
        ("hoodie.clustering.plan.strategy.small.file.limit", "lots", "valid integer"),
    ):
        with pytest.raises(ConfigError, match=message) as err:
            ClusteringPolicy.from_mapping({key: value})
        assert key in str(err.value)
    with pytest.raises(ConfigError, match="unknown clustering setting"):
        ClusteringPolicy.from_mapping({"hoodie.clustering.plan.strategy.max.num.group": "3"}, strict=True)


def test_java_hash_set_order_matches_java() -> None:
    # Expected orders printed by jshell (java.util.HashSet filled in this order, then new ArrayList<>(set)).
    assert java_hash_set_order(["region=apac", "region=eu", "region=us"]) == ["region=eu", "region=us", "region=apac"]
    assert java_hash_set_order(["city=chennai", "city=san_francisco", "city=sao_paulo", "über/ß", "x"]) == [
        "city=san_francisco",
        "city=sao_paulo",
        "x",
        "über/ß",
        "city=chennai",
    ]
    mixed = ["2024/01/01", "2024/01/02", "2024/01/03", "2024/02/01", "city=chennai", "city=san_francisco"]
    assert java_hash_set_order([*mixed, "city=sao_paulo", "", "2024/01/01"]) == [
        "",
        "city=san_francisco",
        "2024/02/01",
        "city=sao_paulo",
        "2024/01/03",
        "2024/01/01",
        "2024/01/02",
        "city=chennai",
    ]
    assert java_hash_set_order(list("abcdefghijklmnopqrst")) == list("abcdefghijklmnopqrst")


# --- (c) tables written by the write client ----------------------------------------------------------------------


def _table(
    tmp_path: Path,
    version: int,
    mor: bool,
    *,
    records: int = 240,
    max_file_records: int = 20,
    partitions: int = 3,
    updates: int = 0,
) -> tuple[HudiTable, WriteClient]:
    storage = Storage()
    path = str(tmp_path / f"t{version}{'m' if mor else 'c'}")
    create_table(
        storage,
        path,
        TableSpec(
            name="t",
            table_type=TableType.MERGE_ON_READ if mor else TableType.COPY_ON_WRITE,
            version=version,
            schema=avro_schema_from_arrow(TRIP_SCHEMA, "t_record", "hoodie.t"),
            record_key_fields=("uuid",),
            partition_fields=("city",),
            ordering_fields=("ts",),
        ),
    )
    client = WriteClient(storage, path, options=WriteOptions(max_file_records=max_file_records))
    for step in Workload(records, 1 + updates, 0.2, partitions=partitions, seed=11).steps():
        client.apply(step)
    return HudiTable.open(storage, path), client


def _new_instant(table: HudiTable) -> tuple[str, Timeline]:
    timeline = table.reload()
    return table.active.new_instant_time(timeline), timeline


def _request(table: HudiTable, plan: HoodieClusteringPlan, c: str) -> Instant:
    version = table.config.version
    return table.active.create_requested(
        c, clustering_action(version), encode_requested_clustering(plan, table_version=version)
    )


def _slices_of(plan: HoodieClusteringPlan) -> list[tuple[str, str]]:
    return [(s.partition_path or "", s.file_id or "") for g in plan.input_groups or () for s in g.slices or ()]


KINDS = [(6, False), (6, True), (9, False), (9, True)]
KIND_IDS = ["v6-cow", "v6-mor", "v9-cow", "v9-mor"]


@pytest.mark.parametrize(("version", "mor"), KINDS, ids=KIND_IDS)
def test_groups_slices_metrics_and_caps(tmp_path: Path, version: int, mor: bool) -> None:
    table, _ = _table(tmp_path, version, mor, updates=2)
    c, timeline = _new_instant(table)
    view = table.file_system_view(timeline=timeline)
    latest = {s.file_group_id: s for s in view.latest_slices()}
    assert len(latest) >= 9 and (not mor or any(len(s.log_files) > 1 for s in latest.values()))
    plan = plan_clustering(table, c, ClusteringPolicy(), timeline=timeline)
    assert plan is not None and plan.version == 1 and plan.preserve_hoodie_metadata is True
    assert plan.strategy is not None and plan.strategy.strategy_class_name == EXECUTION
    assert plan.strategy.strategy_params == {} and plan.extra_metadata == {}
    assert plan.missing_schedule_partitions == (None if version == 6 else ())
    groups = plan.input_groups or ()
    # Small files: one group per partition, partitions in order, every latest slice once, largest first.
    assert [g.slices[0].partition_path for g in groups] == view.partitions()  # type: ignore[index]
    assert sorted(_slices_of(plan)) == sorted(latest)
    for g in groups:
        members = [latest[(s.partition_path or "", s.file_id or "")] for s in g.slices or ()]
        sizes = [slice_size(m, ClusteringPolicy()) for m in members]
        assert sizes == sorted(sizes, reverse=True) and g.num_output_file_groups == 1
        assert g.metrics == group_metrics(members, 120 * 1024 * 1024) and g.version == 1
        assert g.metrics["TOTAL_LOG_FILES"] == sum(len(m.log_files) for m in members)  # type: ignore[index]
        assert g.metrics["TOTAL_LOG_FILES_SIZE"] == sum(m.log_size for m in members)  # type: ignore[index]
        for s, m in zip(g.slices or (), members, strict=True):
            assert s.data_file_path == ("file:" + m.base_file.location if m.base_file else "")
            newest_first = sorted(m.log_files, key=lambda lf: lf.name.sort_key, reverse=True)
            assert s.delta_file_paths == tuple("file:" + lf.location for lf in newest_first)
            assert (s.bootstrap_file_path, s.version) == ("", 1)
    # The requested file decodes with our codec and with the reference schema of the version.
    data = encode_requested_clustering(plan, table_version=version)
    decoded = decode_requested_replace_metadata(data, path="x")
    expected = plan if version >= 8 else plan.model_copy(update={"missing_schedule_partitions": None})
    assert decoded == requested_replace_metadata(expected) and decoded.operation_type == "CLUSTER"
    reference = _records(data, _avsc(version))[0]
    assert reference["clusteringPlan"]["inputGroups"][0]["slices"][0]["fileId"] == groups[0].slices[0].file_id  # type: ignore[call-overload, index]

    # Byte cap: groups close before the slice that would pass it; output files by target size.
    sizes_all = sorted(slice_size(s, ClusteringPolicy()) for s in latest.values())
    cap = int(sizes_all[len(sizes_all) // 2] * 2.5)
    capped = ClusteringPolicy(max_bytes_per_group=cap, target_file_max_bytes=cap // 2)
    plan2 = plan_clustering(table, c, capped, timeline=timeline)
    assert plan2 is not None and sorted(_slices_of(plan2)) == sorted(latest)
    groups2 = plan2.input_groups or ()
    assert len(groups2) > len(groups)
    for i, g in enumerate(groups2):
        members = [latest[(s.partition_path or "", s.file_id or "")] for s in g.slices or ()]
        total = sum(slice_size(m, capped) for m in members)
        assert total <= cap or len(members) == 1
        assert g.num_output_file_groups == math.ceil(total / (cap // 2))
        nxt = groups2[i + 1] if i + 1 < len(groups2) else None
        if nxt is not None and nxt.slices[0].partition_path == g.slices[0].partition_path:  # type: ignore[index]
            first = latest[(nxt.slices[0].partition_path or "", nxt.slices[0].file_id or "")]  # type: ignore[index]
            assert total + slice_size(first, capped) > cap

    # Group count cap: the first two groups of the plan above; partitions left partly unplanned are "missing".
    two = plan_clustering(table, c, capped.model_copy(update={"max_num_groups": 2}), timeline=timeline)
    assert two is not None and list(two.input_groups or ()) == list(groups2[:2])
    heads = [(g.slices or ())[0].partition_path for g in groups2]
    counts = {p: heads.count(p) for p in view.partitions()}
    partial = [p for p in view.partitions() if counts[p] >= 3]  # a third group would have started
    overflow, taken = [], 0
    for p in view.partitions():
        k = min(counts[p], 2)
        if k > 2 - taken:
            overflow.append(p)
        taken = min(2, taken + k)
    expected_missing = java_hash_set_order([*partial, *overflow])
    assert two.missing_schedule_partitions == (None if version == 6 else tuple(expected_missing))


@pytest.mark.parametrize("version", [6, 9])
def test_single_group_rule_and_sort_columns(tmp_path: Path, version: int) -> None:
    table, _ = _table(tmp_path, version, False, records=60, max_file_records=1000)
    c, timeline = _new_instant(table)
    view = table.file_system_view(timeline=timeline)
    assert all(len(view.latest_slices(p)) == 1 for p in view.partitions())
    singles = plan_clustering(table, c, ClusteringPolicy(), timeline=timeline)
    assert singles is not None and [len(g.slices or ()) for g in singles.input_groups or ()] == [1, 1, 1]
    off = ClusteringPolicy(single_group_clustering_enabled=False)
    assert plan_clustering(table, c, off, timeline=timeline) is None
    sorted_ = plan_clustering(table, c, off.model_copy(update={"sort_columns": "fare,rider"}), timeline=timeline)
    assert sorted_ is not None and len(sorted_.input_groups or ()) == 3
    assert sorted_.strategy is not None and sorted_.strategy.strategy_params == {SORT_KEY: "fare,rider"}

    # Groups closed by the byte cap stay, even single ones; only a partition's last single group goes.
    table2, _ = _table(tmp_path / "b", version, False, records=90, max_file_records=10, partitions=1)
    c2, timeline2 = _new_instant(table2)
    n = len(table2.file_system_view(timeline=timeline2).latest_slices())
    tiny = off.model_copy(update={"max_bytes_per_group": 1})
    plan = plan_clustering(table2, c2, tiny, timeline=timeline2)
    assert plan is not None and [len(g.slices or ()) for g in plan.input_groups or ()] == [1] * (n - 1)
    kept = plan_clustering(
        table2, c2, tiny.model_copy(update={"single_group_clustering_enabled": True}), timeline=timeline2
    )
    assert kept is not None and len(kept.input_groups or ()) == n


@pytest.mark.parametrize("version", [6, 9])
def test_small_file_limit_and_partition_filters(tmp_path: Path, version: int) -> None:
    table, _ = _table(tmp_path, version, False)
    c, timeline = _new_instant(table)
    view = table.file_system_view(timeline=timeline)
    parts = view.partitions()
    sizes = sorted({s.base_file.size for s in view.latest_slices() if s.base_file})
    limit = sizes[len(sizes) // 2]
    plan = plan_clustering(table, c, ClusteringPolicy(small_file_limit=limit), timeline=timeline)
    assert plan is not None
    small = {s.file_group_id for s in view.latest_slices() if s.base_file and s.base_file.size < limit}
    assert set(_slices_of(plan)) == small and len(small) < len(view.latest_slices())

    def planned(**kw: object) -> list[str]:
        p = plan_clustering(table, c, ClusteringPolicy.model_validate(kw), timeline=timeline)
        return [] if p is None else list(dict.fromkeys(s for s, _ in _slices_of(p)))

    assert planned(**{"hoodie.clustering.plan.strategy.partition.regex.pattern": parts[1]}) == [parts[1]]
    assert planned(**{"hoodie.clustering.plan.strategy.partition.regex.pattern": parts[1][:-1]}) == []
    selected = f"{parts[2]},city=nowhere,{parts[0]}"
    assert planned(**{"hoodie.clustering.plan.strategy.partition.selected": selected}) == [parts[2], parts[0]]
    between = {
        "hoodie.clustering.plan.partition.filter.mode": "SELECTED_PARTITIONS",
        "hoodie.clustering.plan.strategy.cluster.begin.partition": parts[1],
    }
    assert planned(**between) == parts[1:]
    assert planned(**{**between, "hoodie.clustering.plan.strategy.cluster.end.partition": parts[1]}) == [parts[1]]
    with pytest.raises(InvalidTimelineError, match="not newer"):
        plan_clustering(table, timeline.instants[-1].requested_time, ClusteringPolicy(), timeline=timeline)


@pytest.mark.parametrize("version", [6, 9])
def test_pending_compaction_and_clustering_are_left_out(tmp_path: Path, version: int) -> None:
    table, _ = _table(tmp_path, version, True, updates=1)
    c1, timeline = _new_instant(table)
    compaction = plan_compaction(
        table, c1, CompactionPolicy(strategy=CompactionStrategyName.UNBOUNDED), timeline=timeline
    )
    assert compaction is not None and len(compaction.operations or ()) > 2
    compaction = compaction.model_copy(update={"operations": (compaction.operations or ())[:2]})
    table.active.create_requested(c1, Action.COMPACTION, encode_compaction_plan(compaction, table_version=version))
    compacting = {(o.partition_path or "", o.file_id or "") for o in compaction.operations or ()}
    c2, timeline = _new_instant(table)
    view = table.file_system_view(timeline=timeline)
    plan = plan_clustering(table, c2, ClusteringPolicy(), timeline=timeline)
    assert plan is not None
    assert set(_slices_of(plan)) == {s.file_group_id for s in view.latest_slices()} - compacting
    # A plan naming a file group under compaction is refused.
    fg = sorted(compacting)[0]
    s = next(x for x in view.latest_merged_slices(fg[0]) if x.file_id == fg[1])
    assert s.base_file is not None
    sneaky = _replace_first_slice(
        plan, file_id=fg[1], partition_path=fg[0], data_file_path="file:" + s.base_file.location, delta_file_paths=()
    )
    instant2 = Instant(c2, clustering_action(version), State.REQUESTED)
    with pytest.raises(InvalidPlanError, match=f"under pending compaction {c1}"):
        validate_clustering_plan(table, instant2, sneaky, plan_file="p", timeline=timeline)

    # Requested: the view sees the clustered groups, the next plan leaves them out.
    requested = _request(table, plan, c2)
    assert table.pending_clustering(table.reload()) == [requested]
    assert set(table.file_system_view().inputs.pending_clustering) == set(_slices_of(plan))
    c3, timeline3 = _new_instant(table)
    assert plan_clustering(table, c3, ClusteringPolicy(), timeline=timeline3) is None
    groups = validate_clustering_plan(table, requested, plan, plan_file="p")
    assert [(g.partition, s.file_id) for g in groups for s in g.slices] == _slices_of(plan)
    for g in groups:
        for si in g.slices:
            latest = next(x for x in view.latest_slices(g.partition) if x.file_id == si.file_id)
            assert si.base_instant_time == latest.base_instant_time
            assert si.base_file == (latest.base_file.location if latest.base_file else None)
            assert si.log_files == tuple(lf.location for lf in latest.log_files)  # log order, oldest first
    other = Instant(c3, clustering_action(version), State.REQUESTED)
    with pytest.raises(InvalidPlanError, match=f"also under pending clustering {c2}"):
        validate_clustering_plan(table, other, plan, plan_file="p")


def _complete_noop_clustering(table: HudiTable, requested: Instant) -> Instant:
    """Complete a requested clustering without rewriting anything (enough for the trigger and incremental rules)."""
    instant = table.active.transition_to_inflight(requested)
    md = HoodieReplaceCommitMetadata.empty().model_copy(update={"operation_type": "CLUSTER"})
    content = encode_replace_commit_metadata(md, table_version=table.config.version)
    return table.active.transition_to_completed(instant, content, timeline=table.reload())


def _one_city_upsert(client: WriteClient, table: HudiTable, partition: str) -> None:
    step = list(Workload(240, 2, 0.2, partitions=3, seed=11).steps())[1]
    city = partition.split("=", 1)[1]
    rows = step.records.filter(step.records.column("city").to_numpy(zero_copy_only=False) == city)
    client.apply(WorkloadStep(step.operation, rows))


def test_trigger_and_incremental_partitions(tmp_path: Path) -> None:
    table, client = _table(tmp_path, 9, False)
    policy = ClusteringPolicy(enabled=True, async_max_commits=2)
    assert clustering_due(table, table.reload(), policy)[0] is False  # one commit
    parts = table.file_system_view().partitions()
    _one_city_upsert(client, table, parts[0])
    assert clustering_due(table, table.reload(), policy) == (
        True,
        "due: 2 completed commits and no clustering yet (threshold 2)",
    )
    c, timeline = _new_instant(table)
    plan = plan_clustering(table, c, ClusteringPolicy(max_num_groups=1), timeline=timeline)
    assert plan is not None and plan.missing_schedule_partitions == tuple(java_hash_set_order(parts[1:]))
    requested = _request(table, plan, c)
    # A pending clustering restarts the count; an insert overwrite is a commit, not a clustering.
    assert commits_since_last_clustering(table, table.reload()) == (0, requested)
    done = _complete_noop_clustering(table, requested)
    assert commits_since_last_clustering(table, table.reload())[0] == 0
    client.insert_overwrite(next(iter(Workload(30, 1, partitions=3, seed=4).steps())).records.slice(0, 1))
    assert commits_since_last_clustering(table, table.reload()) == (1, done)

    # Incremental: partitions written since the completed clustering, plus those its plan left out.
    written = parts[2]
    _one_city_upsert(client, table, written)
    c2, timeline2 = _new_instant(table)
    view2 = table.file_system_view(timeline=timeline2)
    overwritten = table.commit_metadata(timeline2.instants[-2]).partition_to_write_stats or {}
    expected = java_hash_set_order([*overwritten, written, *(plan.missing_schedule_partitions or ())])
    assert plan_partitions(table, timeline2, view2, c2, ClusteringPolicy()) == (expected, [])
    full = ClusteringPolicy(incremental=False)
    assert plan_partitions(table, timeline2, view2, c2, full) == (parts, [])
    selected = ClusteringPolicy(partition_selected=parts[0])
    assert plan_partitions(table, timeline2, view2, c2, selected) == (
        [parts[0]],
        list(plan.missing_schedule_partitions or ()),
    )
    incremental = plan_clustering(table, c2, ClusteringPolicy(), timeline=timeline2)
    assert incremental is not None
    assert [g.slices[0].partition_path for g in incremental.input_groups or ()] == [p for p in expected if p in parts]  # type: ignore[index]
    # Nothing written since a completed clustering that left nothing out: nothing to plan.
    last = plan_clustering(table, c2, ClusteringPolicy(max_num_groups=30), timeline=timeline2)
    assert last is not None and last.missing_schedule_partitions == ()
    _complete_noop_clustering(table, _request(table, last, _new_instant(table)[0]))
    c3, timeline3 = _new_instant(table)
    assert plan_clustering(table, c3, ClusteringPolicy(), timeline=timeline3) is None
    assert plan_clustering(table, c3, full, timeline=timeline3) is not None


@pytest.mark.parametrize("version", [6, 9])
def test_validation_refuses_bad_plans(tmp_path: Path, version: int) -> None:
    table, client = _table(tmp_path, version, True, updates=1)
    c, timeline = _new_instant(table)
    plan = plan_clustering(table, c, ClusteringPolicy(), timeline=timeline)
    assert plan is not None
    instant = Instant(c, clustering_action(version), State.REQUESTED)
    first = (plan.input_groups or ())[0].slices[0]  # type: ignore[index]
    base = first.data_file_path or ""
    name = base.rsplit("/", 1)[1]
    root = "file:" + table.base_path
    g0 = (plan.input_groups or ())[0]
    cases: list[tuple[HoodieClusteringPlan, type[Exception], str]] = [
        (plan.model_copy(update={"input_groups": ()}), InvalidPlanError, "no input groups"),
        (_replace_first_slice(plan, file_id=""), InvalidPlanError, "has no fileId"),
        (_replace_first_slice(plan, data_file_path="file:/etc/passwd"), InvalidPlanError, "outside the table"),
        (_replace_first_slice(plan, data_file_path=f"{root}/../x/{name}"), InvalidPlanError, "outside|escapes"),
        (
            _replace_first_slice(plan, data_file_path=f"{root}/city=elsewhere/{name}"),
            InvalidPlanError,
            "not in partition",
        ),
        (_only_first_slice(plan, partition_path="../up"), InvalidPlanError, "escapes"),
        (_replace_first_slice(plan, file_id="other-0"), InvalidPlanError, "is not a base file of file group"),
        (_replace_first_slice(plan, bootstrap_file_path="file:/b.parquet"), InvalidPlanError, "bootstrap"),
        (_replace_first_slice(plan, data_file_path="", delta_file_paths=()), InvalidPlanError, "names no file"),
        (
            _replace_first_slice(plan, data_file_path=base.replace("_0-1-1_", "_9-9-9_")),
            FileMissingError,
            "does not exist",
        ),
        (
            plan.model_copy(update={"input_groups": (g0, g0)}),
            InvalidPlanError,
            "appears twice",
        ),
    ]
    other_part = next(g for g in plan.input_groups or () if g.slices[0].partition_path != first.partition_path)  # type: ignore[index]
    mixed = g0.model_copy(update={"slices": (*(g0.slices or ()), *(other_part.slices or ()))})
    cases.append((plan.model_copy(update={"input_groups": (mixed,)}), InvalidPlanError, "mixes partitions"))
    for bad, error, message in cases:
        with pytest.raises(error, match=message) as err:
            validate_clustering_plan(table, instant, bad, plan_file="c.requested", timeline=timeline)
        assert err.value.path == "c.requested", message  # type: ignore[attr-defined]
    earlier = Instant(timeline.instants[0].requested_time, clustering_action(version), State.REQUESTED)
    with pytest.raises(InvalidPlanError, match="not before clustering"):
        validate_clustering_plan(table, earlier, plan, plan_file="c.requested", timeline=timeline)
    # A replaced file group (insert overwrite of its partition) cannot be clustered.
    city = (first.partition_path or "").split("=", 1)[1]
    rows = next(iter(Workload(240, 1, partitions=3, seed=11).steps())).records
    client.insert_overwrite(rows.filter(rows.column("city").to_numpy(zero_copy_only=False) == city).slice(0, 2))
    with pytest.raises(InvalidPlanError, match="was replaced at"):
        validate_clustering_plan(table, instant, plan, plan_file="c.requested", timeline=table.reload())
