"""Clean planning against an independent model of the file slices, and hudi-rs reading the same data after the
clean (every policy, table versions 6, 8 and 9, copy-on-write and merge-on-read)."""

from __future__ import annotations

import posixpath
import shutil
import time
from datetime import timedelta
from pathlib import Path

import fastavro
import pytest

from tableservice.errors import ConfigError, InvalidTimelineError
from tableservice.hudi.action.clean import dry_run, execute_clean, schedule_clean
from tableservice.hudi.models import (
    HoodieSavepointMetadata,
    HoodieSavepointPartitionMetadata,
    decode_cleaner_plan,
    encode_cleaner_plan,
    encode_savepoint_metadata,
)
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action, State, parse_instant_time, timeline_timezone
from tableservice.hudi.write.workload import Workload
from tableservice.planning.clean.plan import (
    CleanerPolicyName,
    CleanPlanner,
    CleanPolicy,
    clean_due,
    earliest_commit_to_retain,
    load_clean_timeline,
    partitions_to_clean,
    plan_clean,
)
from tableservice.storage import Storage
from tests.support.clean_helpers import (
    CASES,
    IDS,
    POLICIES,
    SF,
    SP,
    build_all,
    complete_compaction,
    copy_of,
    create,
    data_files,
    expected_ectr,
    expected_files,
    insert_into,
    ledger,
    plan_relative,
    reads,
    relative,
    schedule_compaction,
    scheduled,
    timeline_of,
)
from tests.support.oracle import hudi_read, hudi_slices


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, TableType], str]:
    return build_all(tmp_path_factory.mktemp("clean_tables"))


# --- policy ----------------------------------------------------------------------------------------


def test_policy_defaults_keys_and_errors() -> None:
    p = CleanPolicy()
    assert (p.policy, p.commits_retained, p.hours_retained, p.file_versions_retained) == (
        "KEEP_LATEST_COMMITS",
        10,
        24,
        3,
    )
    assert (p.max_commits, p.incremental_mode, p.delete_bootstrap_base_file) == (1, True, False)
    assert CleanPolicy.keys()["hoodie.cleaner.fileversions.retained"] == "file_versions_retained"
    q = CleanPolicy.from_mapping(
        {
            "hoodie.cleaner.policy": "keep_latest_file_versions",
            "hoodie.cleaner.fileversions.retained": "2",
            "hoodie.cleaner.incremental.mode": "false",
            "hoodie.clean.delete.bootstrap.base.file": "true",
            "hoodie.clean.automatic": "true",
        },
        strict=True,
    )
    assert (q.policy, q.file_versions_retained, q.incremental_mode, q.delete_bootstrap_base_file) == (
        "KEEP_LATEST_FILE_VERSIONS",
        2,
        False,
        True,
    )
    assert q.to_mapping()["hoodie.cleaner.policy"] == "KEEP_LATEST_FILE_VERSIONS"
    with pytest.raises(ConfigError, match=r"hoodie.cleaner.policy='KEEP_NOTHING'"):
        CleanPolicy.from_mapping({"hoodie.cleaner.policy": "KEEP_NOTHING"})
    with pytest.raises(ConfigError, match=r"hoodie.cleaner.commits.retained='0'"):
        CleanPolicy.from_mapping({"hoodie.cleaner.commits.retained": "0"})
    with pytest.raises(ConfigError, match=r"hoodie.cleaner.comits.retained=2"):
        CleanPolicy.from_mapping({"hoodie.cleaner.comits.retained": 2}, strict=True)


# --- planning and execution against the model ------------------------------------------------------


@pytest.mark.oracle
@pytest.mark.parametrize("kind", sorted(POLICIES))
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_clean_deletes_what_the_rules_say_and_readers_see_the_same_data(
    built: dict[tuple[int, TableType], str], case: tuple[int, TableType], kind: str, tmp_path: Path
) -> None:
    version, _ = case
    path = copy_of(built, case, tmp_path)
    table = HudiTable.open(Storage(), path)
    book = ledger(table)
    policy = CleanPolicy.from_mapping(POLICIES[kind])
    now = None
    if kind == "hours":  # an hour after the third newest write: it becomes the earliest to retain
        now = parse_instant_time(book.completed[-3], timeline_timezone(table.config.timezone_name)) + timedelta(hours=1)
    ectr = {"commits": expected_ectr(book, 2), "versions": None, "hours": book.completed[-3]}[kind]
    found = earliest_commit_to_retain(timeline_of(table), policy, now=now, tz=timeline_timezone("UTC"))
    assert (found.requested_time if found else None) == ectr
    expected = expected_files(book, ectr, 1 if kind == "versions" else None)
    assert expected, "the table must have something to clean"
    retained = [t for t in book.completed if ectr is not None and t >= ectr]
    before = reads(path, retained)
    files_before = data_files(path)

    instant = schedule_clean(table, CleanPlanner(policy, now=now), force=True)
    assert instant is not None and instant.state is State.REQUESTED
    plan_file = table.active.path_of(instant)
    raw = Path(plan_file).read_bytes()
    plan = decode_cleaner_plan(raw, path=plan_file)
    with open(plan_file, "rb") as f:
        schema = fastavro.reader(f).writer_schema
    assert isinstance(schema, dict) and schema["name"] == "org.apache.hudi.avro.model.HoodieCleanerPlan"
    assert [x["name"] for x in schema["fields"]] == [
        "earliestInstantToRetain",
        "lastCompletedCommitTimestamp",
        "policy",
        "filesToBeDeletedPerPartition",
        "version",
        "filePathsToBeDeletedPerPartition",
        "partitionsToBeDeleted",
        "extraMetadata",
    ]
    assert decode_cleaner_plan(encode_cleaner_plan(plan, table_version=version), path="again") == plan
    assert plan.version == 2 and plan.policy == policy.policy.value and plan.files_to_be_deleted_per_partition == {}
    assert plan.last_completed_commit_timestamp == book.completed[-1]
    if ectr is None:
        assert plan.earliest_instant_to_retain is None
    else:
        eir = plan.earliest_instant_to_retain
        assert eir is not None and (eir.timestamp, eir.state) == (ectr, "COMPLETED")
        assert eir.action in ("commit", "deltacommit", "replacecommit")
    assert plan_relative(path, plan) == expected
    assert plan.partitions_to_be_deleted == ()
    assert set(dry_run(table, instant).locations()) == {f"{path}/{r}" for r in expected}

    md = execute_clean(table, instant)
    done = table.reload().get(instant.requested_time)
    assert done is not None and done.is_completed
    assert md.total_files_deleted == len(expected)
    assert md.earliest_commit_to_retain == (ectr or "")
    assert md.last_completed_commit_timestamp == book.completed[-1]
    assert md.start_clean_time == instant.requested_time and md.version == 2
    files = plan.file_paths_to_be_deleted_per_partition or {}
    assert set(md.partition_metadata) == set(files)
    for p, pm in md.partition_metadata.items():
        names = {posixpath.basename(fi.file_path or "") for fi in files[p]}
        assert set(pm.success_delete_files) == set(pm.delete_path_patterns) == names
        assert pm.failed_delete_files == () and pm.is_partition_deleted is False and pm.policy == plan.policy
    assert data_files(path) == files_before - expected

    after = reads(path, retained)
    for t, table_before in before.items():
        assert after[t].equals(table_before), f"as of {t}"


@pytest.mark.oracle
@pytest.mark.parametrize("version", [6, 9])
def test_savepointed_slices_survive(tmp_path: Path, version: int) -> None:
    path = str(tmp_path / "t")
    client = create(path, version, TableType.COPY_ON_WRITE)
    results = [client.apply(s) for s in Workload(120, 5, 0.4, 0.0, partitions=2, seed=3).steps()]
    saved_at = results[1].instant_time
    saved_files: dict[str, list[str]] = {}
    for partition, _, base, logs in hudi_slices(path, as_of=saved_at):
        saved_files.setdefault(partition, []).extend([base, *logs])
    table = HudiTable.open(Storage(), path)
    md = HoodieSavepointMetadata(
        savepointed_by="test",
        savepointed_at=int(time.time()),
        comments="",
        partition_metadata={
            p: HoodieSavepointPartitionMetadata(partition_path=p, savepoint_data_file=tuple(f))
            for p, f in saved_files.items()
        },
        version=1,
    )
    # A savepoint carries the time of the commit it protects: `<t>.savepoint.inflight`, then completed.
    inflight = table.active.create_inflight(saved_at, Action.SAVEPOINT)
    table.active.transition_to_completed(inflight, encode_savepoint_metadata(md, table_version=version))
    ct = load_clean_timeline(table)
    assert [s.requested_time for s in ct.savepoints] == [saved_at]
    assert saved_at in [i.requested_time for i in ct.timeline.completed_writes()]
    before_saved = hudi_read(path, as_of=saved_at)
    policy = CleanPolicy(commits_retained=1)
    book = ledger(table)
    names = {n for f in saved_files.values() for n in f}
    expected = expected_files(book, book.completed[-1], None, names)
    assert expected and expected != expected_files(book, book.completed[-1], None)
    plan = plan_clean(table, table.active.new_instant_time(table.reload()), policy)
    assert plan is not None and plan_relative(path, plan) == expected
    assert plan.extra_metadata == {"savepointed_timestamps": saved_at}
    instant = schedule_clean(table, CleanPlanner(policy), force=True)
    assert instant is not None
    result = execute_clean(table, instant)
    assert result.extra_metadata == {"savepointed_timestamps": saved_at}
    left = {posixpath.basename(f) for f in data_files(path)}
    assert names <= left
    assert hudi_read(path, as_of=saved_at).equals(before_saved)
    # Incremental mode: nothing written since the last clean's ECTR, unless a savepoint it recorded is gone.
    timeline = timeline_of(table)
    same = timeline.get(result.earliest_commit_to_retain)
    assert same is not None
    assert partitions_to_clean(table, timeline, policy, same, [saved_at], [SF, SP]) == []
    assert partitions_to_clean(table, timeline, policy, same, [], [SF, SP]) == [SF, SP]


@pytest.mark.oracle
@pytest.mark.parametrize("version", [6, 8, 9])
def test_slices_under_pending_compaction_are_kept(tmp_path: Path, version: int) -> None:
    path = str(tmp_path / "t")
    client = create(path, version, TableType.MERGE_ON_READ)
    steps = list(Workload(160, 7, 0.3, 0.0, partitions=2, seed=8).steps())
    for step in steps[:3]:
        client.apply(step)
    complete_compaction(path, schedule_compaction(path))
    client.apply(steps[3])
    pending = schedule_compaction(path)
    for step in steps[4:]:
        client.apply(step)
    table = HudiTable.open(Storage(), path)
    book = ledger(table)
    assert book.pending == [pending.requested_time] and book.pending_base
    needed = table.compaction_plan(pending)
    for kind, versions in (("commits", None), ("versions", 1)):
        policy = CleanPolicy.from_mapping(POLICIES[kind])
        ectr = expected_ectr(book, 2) if versions is None else None
        if versions is None:
            assert ectr is not None and ectr < pending.requested_time  # never past the pending compaction
        plan = plan_clean(table, table.active.new_instant_time(table.reload()), policy)
        expected = expected_files(book, ectr, versions)
        assert expected and plan is not None and plan_relative(path, plan) == expected
        named = {
            posixpath.basename(relative(path, fi.file_path or ""))
            for infos in (plan.file_paths_to_be_deleted_per_partition or {}).values()
            for fi in infos
        }
        assert needed.operations
        for op in needed.operations or ():
            assert not ({op.data_file_path, *(op.delta_file_paths or ())} & named)
    # The clean leaves everything the pending compaction reads: completing it gives the same data as on a copy
    # that was not cleaned.
    untouched = str(tmp_path / "untouched")
    shutil.copytree(path, untouched)
    files_before = data_files(path)
    instant = schedule_clean(table, CleanPlanner(CleanPolicy.from_mapping(POLICIES["versions"])), force=True)
    assert instant is not None
    md = execute_clean(table, instant)
    assert md.total_files_deleted == len(expected_files(book, None, 1))
    assert files_before - data_files(path) == expected_files(book, None, 1)
    complete_compaction(path, pending)
    complete_compaction(untouched, pending)
    assert hudi_read(path).equals(hudi_read(untouched))


# --- incremental mode, trigger -----------------------------------------------------------------------


def test_incremental_mode_looks_only_at_partitions_written_since_the_last_clean(
    built: dict[tuple[int, TableType], str], tmp_path: Path
) -> None:
    path = copy_of(built, (9, TableType.COPY_ON_WRITE), tmp_path)
    insert_into(path, "sao_paulo", 21)
    policy = CleanPolicy(commits_retained=1)
    table, instant, first_plan = scheduled(path, policy)
    assert set(first_plan.file_paths_to_be_deleted_per_partition or {}) == {SF, SP}  # no earlier clean: all
    execute_clean(table, instant)
    insert_into(path, "sao_paulo", 22)
    last = insert_into(path, "sao_paulo", 23)
    timeline = timeline_of(table)
    ectr = earliest_commit_to_retain(timeline, policy)
    assert ectr is not None and ectr.requested_time == last
    assert partitions_to_clean(table, timeline, policy, ectr, [], [SF, SP]) == [SP]
    full = CleanPolicy(commits_retained=1, incremental_mode=False)
    assert partitions_to_clean(table, timeline, full, ectr, [], [SF, SP]) == [SF, SP]
    versions = CleanPolicy(policy=CleanerPolicyName.KEEP_LATEST_FILE_VERSIONS)
    assert partitions_to_clean(table, timeline, versions, None, [], [SF, SP]) == [SF, SP]


def test_clean_due_counts_commits_since_the_last_clean(built: dict[tuple[int, TableType], str], tmp_path: Path) -> None:
    path = copy_of(built, (8, TableType.MERGE_ON_READ), tmp_path)
    table = HudiTable.open(Storage(), path)
    n = len(timeline_of(table).completed_writes())
    assert clean_due(table, None, CleanPolicy(max_commits=n)) == (
        True,
        f"due: {n} completed commits in the active timeline (no clean yet), hoodie.clean.max.commits={n}",
    )
    assert clean_due(table, None, CleanPolicy(max_commits=n + 1))[0] is False
    assert clean_due(table, None, CleanPolicy(enabled=False))[0] is False
    policy = CleanPolicy(commits_retained=2)
    assert schedule_clean(table, CleanPlanner(CleanPolicy(max_commits=n + 1))) is None
    instant = schedule_clean(table, CleanPlanner(policy))
    assert instant is not None
    due, reason = clean_due(table, None, policy)
    assert not due and f"clean {instant.requested_time} is pending" in reason
    execute_clean(table, instant)
    assert clean_due(table, None, policy)[0] is False
    insert_into(path, "sao_paulo", 31)
    due, reason = clean_due(table, None, policy)
    assert due and reason.startswith("due: 1 completed commits after")


def test_nothing_to_clean_writes_no_plan(built: dict[tuple[int, TableType], str], tmp_path: Path) -> None:
    path = copy_of(built, (6, TableType.COPY_ON_WRITE), tmp_path)
    table = HudiTable.open(Storage(), path)
    assert schedule_clean(table, CleanPlanner(CleanPolicy()), force=True) is None  # 6 commits ≤ 10 retained
    assert not table.reload().of_actions(Action.CLEAN)
    with pytest.raises(InvalidTimelineError, match="not newer"):
        plan_clean(table, "20000101000000000", CleanPolicy(commits_retained=1))
    # Merge-on-read without compaction: one slice per file group, nothing any policy deletes.
    mor = str(tmp_path / "mor" / "t")
    client = create(mor, 9, TableType.MERGE_ON_READ)
    for step in Workload(100, 4, 0.3, 0.05, partitions=2, seed=2).steps():
        client.apply(step)
    table = HudiTable.open(Storage(), mor)
    for policy in (
        CleanPolicy(commits_retained=1),
        CleanPolicy(policy=CleanerPolicyName.KEEP_LATEST_FILE_VERSIONS, file_versions_retained=1),
    ):
        assert plan_clean(table, table.active.new_instant_time(table.reload()), policy) is None
