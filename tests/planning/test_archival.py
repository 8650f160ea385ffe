"""Archival: the policy, the planning rules on synthetic timelines, and archiving tables written by our write client
(versions 6, 8, 9), checked against the archive readers, our reader and hudi-rs (snapshot and time travel)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tableservice.errors import ConfigError, CorruptFileError, TableServiceError
from tableservice.hudi.action import archival as archival_mod
from tableservice.hudi.action.archival import archive, instants_with_archived
from tableservice.hudi.action.savepoint import create_savepoint, list_savepoints
from tableservice.hudi.models import (
    HoodieActionInstant,
    HoodieCleanerPlan,
    HoodieCleanMetadata,
    HoodieCommitMetadata,
    encode_clean_metadata,
    encode_cleaner_plan,
)
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import read
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.archive import ArchivedInstant, load_archived_instants
from tableservice.hudi.timeline.archive_lsm import latest_manifest, parse_lsm_file_name
from tableservice.hudi.timeline.archive_v1 import archive_log_files
from tableservice.hudi.timeline.instant import Action, Instant, State
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.planning.archival import (
    ArchivalPolicy,
    cleaner_earliest_commit_to_retain,
    compaction_bound,
    effective_limits,
    instants_to_archive,
    plan_archival,
)
from tableservice.planning.clean.policy import CleanerPolicyName
from tableservice.storage import Storage, join
from tests.support.instant_times import shifted
from tests.support.oracle import assert_same_rows, hudi_read
from tests.support.trip_tables import create_trip_table

ST = Storage()
COMMITS = 35

# --- tables --------------------------------------------------------------------------------------------------


def _write_table(
    path: str, version: int, table_type: TableType, commits: int, *, overwrite_at: int | None = None, seed: int = 3
) -> None:
    create_trip_table(path, version, table_type, storage=ST)
    client = WriteClient(ST, path, options=WriteOptions(max_file_records=20))
    for n, step in enumerate(Workload(60, commits, 0.2, 0.0, partitions=2, seed=seed).steps()):
        if n == overwrite_at:
            client.insert_overwrite(step.records)
        else:
            client.apply(step)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., str]]:
    """Builds each kind of table once per module; every test gets its own copy."""
    cache: dict[tuple[object, ...], str] = {}

    def make(dest: Path, version: int, table_type: TableType = TableType.MERGE_ON_READ, **kw: int | None) -> str:
        key = (version, table_type, tuple(sorted(kw.items())))
        if key not in cache:
            src = str(tmp_path_factory.mktemp("src") / "t")
            _write_table(
                src, version, table_type, int(kw.get("commits") or COMMITS), overwrite_at=kw.get("overwrite_at")
            )
            cache[key] = src
        target = dest / "t"
        shutil.copytree(cache[key], target)
        return str(target)

    yield make


def _times(instants: Iterable[Instant | ArchivedInstant]) -> list[str]:
    return [i.requested_time for i in instants]


def _after(t: str) -> str:
    """An instant time just after `t` (and before the next write, which is milliseconds later)."""
    return shifted(t, 1)


def _write_clean(
    table: HudiTable,
    *,
    ectr: str | None,
    plan_ectr: str | None = None,
    at: str | None = None,
    complete: bool = True,
    extra: dict[str, str] | None = None,
) -> Instant:
    """A clean instant (deleting nothing) with the given earliest commit to retain."""
    tl = table.reload()
    t = at if at is not None else table.active.new_instant_time(tl)
    v = table.config.version
    plan_t = plan_ectr if plan_ectr is not None else ectr
    plan = HoodieCleanerPlan(
        earliest_instant_to_retain=HoodieActionInstant(timestamp=plan_t, action="deltacommit", state="COMPLETED")
        if plan_t
        else None,
        last_completed_commit_timestamp="",
        policy="KEEP_LATEST_COMMITS",
        files_to_be_deleted_per_partition={},
        version=2,
        file_paths_to_be_deleted_per_partition={},
        partitions_to_be_deleted=(),
        extra_metadata=extra,
    )
    requested = table.active.create_requested(t, Action.CLEAN, encode_cleaner_plan(plan, table_version=v))
    if not complete:
        return requested
    inflight = table.active.transition_to_inflight(requested, encode_cleaner_plan(plan, table_version=v))
    md = HoodieCleanMetadata(
        start_clean_time=t,
        time_taken_in_millis=1,
        total_files_deleted=0,
        earliest_commit_to_retain=ectr or "",
        last_completed_commit_timestamp="",
        partition_metadata={},
        version=2,
    )
    return table.active.transition_to_completed(inflight, encode_clean_metadata(md, table_version=v), timeline=tl)


def _snapshot(path: str, as_of: list[str]) -> dict[str | None, pa.Table]:
    out: dict[str | None, pa.Table] = {None: hudi_read(path)}
    out.update({t: hudi_read(path, as_of=t) for t in as_of})
    return out


def _assert_reads(path: str, before: dict[str | None, pa.Table], what: str) -> None:
    for t, rows in before.items():
        assert_same_rows(hudi_read(path, as_of=t), rows, f"hudi-rs {what} as of {t}")


# --- the policy ----------------------------------------------------------------------------------------------


def test_policy_defaults_keys_and_errors() -> None:
    p = ArchivalPolicy()
    assert (p.min_commits, p.max_commits, p.timeline_compaction_batch_size, p.archival_batch) == (20, 30, 10, 10)
    assert (p.cleaner_policy, p.cleaner_commits_retained, p.max_delta_commits) == (
        CleanerPolicyName.KEEP_LATEST_COMMITS,
        10,
        5,
    )
    keys = ArchivalPolicy.keys()
    assert keys["hoodie.keep.min.commits"] == "min_commits"
    assert keys["hoodie.timeline.compaction.batch.size"] == "timeline_compaction_batch_size"
    q = ArchivalPolicy.from_mapping(
        {
            "hoodie.keep.min.commits": "5",
            "hoodie.keep.max.commits": "8",
            "hoodie.cleaner.policy": "keep_latest_by_hours",
            "hoodie.datasource.write.operation": "upsert",  # not ours: ignored
        }
    )
    assert (q.min_commits, q.max_commits, q.cleaner_policy) == (5, 8, CleanerPolicyName.KEEP_LATEST_BY_HOURS)
    assert ArchivalPolicy.from_mapping(q.to_mapping()) == q
    with pytest.raises(
        ConfigError, match=r"hoodie.keep.max.commits=20 must be greater than hoodie.keep.min.commits=20"
    ):
        ArchivalPolicy.from_mapping({"hoodie.keep.max.commits": "20"})
    with pytest.raises(ConfigError, match=r"hoodie.keep.min.commits='zero'"):
        ArchivalPolicy.from_mapping({"hoodie.keep.min.commits": "zero"})
    with pytest.raises(ConfigError, match=r"hoodie.archive.beyond.savepoint='true'"):
        ArchivalPolicy.from_mapping({"hoodie.archive.beyond.savepoint": "true"})
    with pytest.raises(ConfigError, match=r"unknown archival setting hoodie.keep.min.comits='3'"):
        ArchivalPolicy.from_mapping({"hoodie.keep.min.comits": "3"}, strict=True)


# --- planning rules on synthetic timelines ----------------------------------------------------------------------


def _t(n: int) -> str:
    return f"20240101{n // 3600:02d}{n // 60 % 60:02d}{n % 60:02d}000"


def _tl(*instants: Instant, layout: int = 2) -> Timeline:
    return Timeline(tuple(sorted(instants)), layout)


def _done(n: int, action: Action = Action.DELTA_COMMIT, completed_at: int | None = None) -> Instant:
    return Instant(_t(n), action, State.COMPLETED, _t(completed_at if completed_at is not None else n) + "1")


def test_effective_limits_follow_the_cleaner() -> None:
    tl = _tl(*(_done(i) for i in range(40)))
    # 10 retained: ECTR is the 10th newest commit, 9 commits after it + 2 = 11 < 20: unchanged.
    assert cleaner_earliest_commit_to_retain(ArchivalPolicy(), tl, "UTC") == _t(30)
    assert effective_limits(ArchivalPolicy(), tl, "UTC") == (20, 30)
    # 30 retained: ECTR = commit 10, 29 after it + 2 = 31 > 20: min 31, max raised by the same amount.
    keep30 = ArchivalPolicy(cleaner_commits_retained=30)
    assert effective_limits(keep30, tl, "UTC") == (31, 41)
    # A pending commit before the N-th newest pulls the ECTR back to the completed commit before it.
    pending = Instant(_t(5) + "5", Action.DELTA_COMMIT, State.INFLIGHT)
    tl_p = _tl(*tl.instants, pending)
    assert cleaner_earliest_commit_to_retain(keep30, tl_p, "UTC") == _t(5)
    assert effective_limits(keep30, tl_p, "UTC") == (36, 46)
    # By hours: instants a second apart, so one hour back from the latest is the first instant.
    hours = ArchivalPolicy(cleaner_policy=CleanerPolicyName.KEEP_LATEST_BY_HOURS, cleaner_hours_retained=1)
    assert cleaner_earliest_commit_to_retain(hours, tl, "UTC") == _t(0)
    assert effective_limits(hours, tl, "UTC") == (41, 51)
    versions = ArchivalPolicy(cleaner_policy=CleanerPolicyName.KEEP_LATEST_FILE_VERSIONS)
    assert cleaner_earliest_commit_to_retain(versions, tl, "UTC") is None
    assert effective_limits(versions, tl, "UTC") == (20, 30)


def test_compaction_bound_keeps_what_the_trigger_counts() -> None:
    deltas = [_done(i) for i in range(1, 10)]
    # No compaction yet: fewer than max delta commits -> keep from the first; else keep the last `max`.
    assert compaction_bound(_tl(*deltas), 9, 20) == _t(1)
    assert compaction_bound(_tl(*deltas), 9, 3) == _t(7)
    # A completed compaction at 5 (completed at 6): v8+ counts delta commits completed after its requested time.
    compaction = Instant(_t(5) + "5", Action.COMPACTION, State.COMPLETED, _t(6) + "5")
    tl = _tl(*deltas, compaction)
    assert compaction_bound(tl, 9, 20) == compaction.requested_time
    assert compaction_bound(tl, 9, 2) == _t(8)
    # v6 (0.x): delta commits requested after the compaction, any state.
    v6 = Timeline(
        tuple(sorted([*(Instant(_t(i), Action.DELTA_COMMIT, State.COMPLETED) for i in range(1, 10)), compaction])),
        1,
    )
    assert compaction_bound(v6, 6, 4) == _t(6)


# --- archiving tables --------------------------------------------------------------------------------------------


@pytest.mark.oracle
@pytest.mark.parametrize("version", [6, 8, 9])
def test_archival_keeps_the_timeline_between_min_and_max(
    version: int, tmp_path: Path, built: Callable[..., str]
) -> None:
    path = built(tmp_path, version)
    table = HudiTable.open(ST, path)
    completed = list(table.reload().completed_writes())
    assert len(completed) == COMMITS
    before = _snapshot(path, [completed[15].requested_time, completed[27].requested_time])
    ours = read(table)
    files_before = {i.requested_time: table.commit_metadata(i).file_ids() for i in completed[:15]}

    got = archive(table, ArchivalPolicy())
    assert _times(got) == _times(completed[:15])
    active = table.reload()
    assert _times(active.completed_writes().instants) == _times(completed[15:])
    archived = load_archived_instants(ST, path, table.config, completed_only=True)
    assert _times(archived) == _times(completed[:15])
    for a in archived:
        md = a.decode_metadata()
        assert isinstance(md, HoodieCommitMetadata)
        assert md.file_ids() == files_before[a.requested_time]
        if version >= 8:
            assert a.completion_time == completed[_times(completed).index(a.requested_time)].completion_time
    if version == 6:
        assert len(load_archived_instants(ST, path, table.config)) == 45  # requested, inflight, completed
    else:
        _, manifest = latest_manifest(ST, join(path, table.config.history_folder))
        assert [parse_lsm_file_name(n) for n in manifest.file_names] == [
            (completed[0].requested_time, completed[14].requested_time, 0)
        ]
    _assert_reads(path, before, "after archival")
    assert_same_rows(read(HudiTable.open(ST, path)), ours, "our reader after archival")
    assert archive(table, ArchivalPolicy()) == []  # 20 <= 30


@pytest.mark.oracle
def test_repeated_archival_compacts_the_lsm_history(tmp_path: Path, built: Callable[..., str]) -> None:
    path = built(tmp_path, 9, commits=12)
    table = HudiTable.open(ST, path)
    policy = ArchivalPolicy(
        min_commits=3, max_commits=4, timeline_compaction_batch_size=2, cleaner_commits_retained=1, max_delta_commits=1
    )
    active_before = list(table.reload().instants)
    first = archive(table, policy)
    assert len(first) == 9
    assert _times(first) == _times(active_before[:9]), "the oldest instants went first"
    client = WriteClient(ST, path, options=WriteOptions(max_file_records=20))
    for step in Workload(20, 3, 0.3, 0.0, partitions=2, seed=11).steps():
        client.apply(step)
    expected = hudi_read(path)
    active_before = list(table.reload().instants)
    second = archive(table, policy)
    assert len(second) == 3
    assert _times(second) == _times(active_before[:3]), "the oldest active instants went next"
    _, manifest = latest_manifest(ST, join(path, table.config.history_folder))
    parsed = [parse_lsm_file_name(n) for n in manifest.file_names]
    assert parsed == [(first[0].requested_time, second[-1].requested_time, 1)]
    archived = load_archived_instants(ST, path, table.config)
    assert _times(archived) == _times(first + second)
    assert_same_rows(hudi_read(path), expected, "after two archivals")
    assert_same_rows(read(HudiTable.open(ST, path)), expected, "our reader after two archivals")


@pytest.mark.oracle
@pytest.mark.parametrize(
    ("version", "action", "index", "expected"),
    [(6, "deltacommit", 5, 5), (9, "deltacommit", 5, 5), (6, "clean", 7, 8), (9, "clean", 7, 8)],
)
def test_pending_instants_bound_archival(
    version: int, action: str, index: int, expected: int, tmp_path: Path, built: Callable[..., str]
) -> None:
    path = built(tmp_path, version)
    table = HudiTable.open(ST, path)
    completed = list(table.reload().completed_writes())
    t = _after(completed[index].requested_time)
    if action == "clean":
        _write_clean(table, ectr=None, at=t, complete=False)
    else:
        table.active.create_requested(t, Action.DELTA_COMMIT)
    before = _snapshot(path, [completed[expected].requested_time])
    policy = ArchivalPolicy()
    if action != "clean":
        # Hudi's min/max adjustment: the cleaner's ECTR cannot pass the pending write either, so with 10 commits
        # retained min becomes 29 + 2 = 31 and max 41: nothing is archived.
        assert effective_limits(policy, table.reload(), "UTC") == (31, 41)
        assert archive(table, policy) == []
        policy = ArchivalPolicy(cleaner_policy=CleanerPolicyName.KEEP_LATEST_FILE_VERSIONS)
    plan = plan_archival(table, table.reload(), policy)
    got = archive(table, policy)
    # A pending write keeps the completed commit before it (Hudi); any other pending instant keeps itself (ours).
    assert _times(got) == _times(completed[:expected]) == _times(plan.instants)
    assert min(plan.bounds.values()) == (completed[expected].requested_time if action != "clean" else t)
    assert table.reload().get(t) is not None
    _assert_reads(path, before, "with a pending instant")


@pytest.mark.oracle
@pytest.mark.parametrize("version", [6, 9])
def test_savepoint_bounds_archival(version: int, tmp_path: Path, built: Callable[..., str]) -> None:
    path = built(tmp_path, version)
    table = HudiTable.open(ST, path)
    completed = list(table.reload().completed_writes())
    sp = completed[8].requested_time
    create_savepoint(table, sp, user="ops")
    before = _snapshot(path, [sp])
    got = archive(table, ArchivalPolicy())
    assert _times(got) == _times(completed[:8])
    assert [s.instant_time for s in list_savepoints(table)] == [sp]
    timeline = table.reload()
    assert [i.action for i in timeline if i.requested_time == sp] == [Action.DELTA_COMMIT, Action.SAVEPOINT]
    _assert_reads(path, before, "after archival bounded by a savepoint")


@pytest.mark.oracle
@pytest.mark.parametrize("version", [6, 9])
def test_last_clean_bounds_archival_and_older_cleans_go_along(
    version: int, tmp_path: Path, built: Callable[..., str]
) -> None:
    path = built(tmp_path, version)
    table = HudiTable.open(ST, path)
    completed = list(table.reload().completed_writes())
    old_clean = _write_clean(table, ectr=None, at=_after(completed[2].requested_time))
    ectr = completed[10].requested_time
    last_clean = _write_clean(table, ectr=ectr)
    got = archive(table, ArchivalPolicy())
    assert _times(got) == sorted([*_times(completed[:10]), old_clean.requested_time])
    archived = load_archived_instants(ST, path, table.config, completed_only=True)
    cleans = [a for a in archived if a.action is Action.CLEAN]
    assert [c.requested_time for c in cleans] == [old_clean.requested_time]
    md = cleans[0].decode_metadata()
    assert isinstance(md, HoodieCleanMetadata) and md.start_clean_time == old_clean.requested_time
    remaining = table.reload()
    assert remaining.get(last_clean.requested_time) is not None
    assert remaining.completed_writes().first() == completed[10]


@pytest.mark.parametrize("version", [6, 9])
def test_many_cleans(version: int, tmp_path: Path, built: Callable[..., str]) -> None:
    """v6 (TimelineArchiverV1): past `max` cleans the oldest go down to `min`, whatever the commits do; v8+
    (TimelineArchiverV2): only cleans older than the last commit archived go."""
    path = built(tmp_path, version)
    table = HudiTable.open(ST, path)
    completed = list(table.reload().completed_writes())
    cleans = [_write_clean(table, ectr=None) for _ in range(32)]
    got = archive(table, ArchivalPolicy())
    expected = _times(completed[:15]) + (_times(cleans[:12]) if version == 6 else [])
    assert _times(got) == expected
    remaining = [i for i in table.reload() if i.action is Action.CLEAN]
    assert _times(remaining) == _times(cleans[12:] if version == 6 else cleans)


def test_clean_plan_ectr_is_used_when_the_metadata_has_none(tmp_path: Path, built: Callable[..., str]) -> None:
    path = built(tmp_path, 8)
    table = HudiTable.open(ST, path)
    completed = list(table.reload().completed_writes())
    _write_clean(table, ectr=None, plan_ectr=completed[12].requested_time)
    plan = plan_archival(table, table.reload(), ArchivalPolicy())
    assert plan.bounds["earliest commit the last clean retained"] == completed[12].requested_time
    assert _times(plan.instants) == _times(completed[:12])
    assert instants_to_archive(table, table.reload(), ArchivalPolicy()) == list(plan.instants)


@pytest.mark.oracle
def test_replace_commits_stay_until_their_replaced_files_are_cleaned(tmp_path: Path, built: Callable[..., str]) -> None:
    path = built(tmp_path, 9, TableType.COPY_ON_WRITE, overwrite_at=3)
    table = HudiTable.open(ST, path)
    completed = list(table.reload().completed_writes())
    replace = completed[3]
    assert replace.action is Action.REPLACE_COMMIT
    expected = hudi_read(path)
    # No clean yet: Hudi keeps the first replace commit and everything after it.
    assert _times(archive(table, ArchivalPolicy())) == _times(completed[:3])
    # A clean that kept files for a savepoint before the replace commit: Hudi keeps it (the savepoint may be gone).
    _write_clean(
        table, ectr=completed[20].requested_time, extra={"savepointed_timestamps": completed[2].requested_time}
    )
    plan = plan_archival(table, table.reload(), ArchivalPolicy())
    assert plan.bounds["replace commit not cleaned (clean ECTR)"] == replace.requested_time
    # A clean whose ECTR passed the replace commit, but the replaced files still exist: still kept (ours).
    _write_clean(table, ectr=completed[20].requested_time)
    plan = plan_archival(table, table.reload(), ArchivalPolicy())
    assert plan.bounds["replace commit whose replaced files exist"] == replace.requested_time
    assert archive(table, ArchivalPolicy()) == []
    # The cleaner deletes the replaced file groups: now it goes, down to 20 commits.
    replaced = table.replace_commit_metadata(replace).partition_to_replace_file_ids or {}
    removed = 0
    for partition, files in table.list_data_files().items():
        for fi in files:
            if any(fi.name.startswith(fid) for fid in replaced.get(partition, ())):
                ST.delete(fi.location)
                removed += 1
    assert removed > 0
    got = archive(table, ArchivalPolicy())
    assert _times(got) == _times(completed[3:15])
    assert_same_rows(hudi_read(path), expected, "hudi-rs after archiving the cleaned replace commit")
    assert_same_rows(read(HudiTable.open(ST, path)), expected, "our reader after archiving the replace commit")


# --- crashes -----------------------------------------------------------------------------------------------------


@pytest.mark.oracle
@pytest.mark.parametrize("version", [6, 9])
def test_crash_before_deleting_active_files(
    version: int, tmp_path: Path, built: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = built(tmp_path, version)
    table = HudiTable.open(ST, path)
    completed = list(table.reload().completed_writes())
    before = _snapshot(path, [completed[20].requested_time])
    ours = read(table)

    def crash(*_: object) -> None:
        raise RuntimeError("killed")

    monkeypatch.setattr(archival_mod, "delete_active_files", crash)
    with pytest.raises(RuntimeError, match="killed"):
        archive(table, ArchivalPolicy())
    monkeypatch.undo()
    # Archived and still active: every reader sees each instant once.
    assert len(table.reload().completed_writes()) == COMMITS
    assert _times(table.reload().completed_writes().instants) == _times(completed)
    assert _times(load_archived_instants(ST, path, table.config, completed_only=True)) == _times(completed[:15])
    merged = instants_with_archived(table)
    assert _times(merged) == _times(completed)
    assert [i.completion_time for i in merged] == [i.completion_time for i in completed]
    _assert_reads(path, before, "after a crash")
    assert_same_rows(read(HudiTable.open(ST, path)), ours, "our reader after a crash")
    # The next run only deletes the active files: nothing is written twice.
    assert _times(archive(table, ArchivalPolicy())) == _times(completed[:15])
    assert _times(table.reload().completed_writes().instants) == _times(completed[15:])
    assert _times(load_archived_instants(ST, path, table.config, completed_only=True)) == _times(completed[:15])
    folder = join(path, table.config.history_folder)
    if version == 6:
        assert len(archive_log_files(ST, folder)) == 1
    else:
        assert len(latest_manifest(ST, folder)[1].file_names) == 1
    assert _times(instants_with_archived(table)) == _times(completed)
    _assert_reads(path, before, "after the run that finished")


@pytest.mark.oracle
@pytest.mark.parametrize("version", [6, 8])
def test_crash_while_deleting_active_files(
    version: int, tmp_path: Path, built: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = built(tmp_path, version)
    table = HudiTable.open(ST, path)
    completed = list(table.reload().completed_writes())
    before = _snapshot(path, [completed[16].requested_time])
    real_delete = Storage.delete
    calls = {"n": 0}

    def flaky_delete(self: Storage, location: str, *, missing_ok: bool = True) -> bool:
        if location.rsplit("/", 1)[0] == table.active.folder:
            calls["n"] += 1
            if calls["n"] > 38:  # all 30 pending-state files, then 8 completed ones
                raise TableServiceError("storage went away", path=location)
        return real_delete(self, location, missing_ok=missing_ok)

    monkeypatch.setattr(Storage, "delete", flaky_delete)
    with pytest.raises(TableServiceError, match="storage went away"):
        archive(table, ArchivalPolicy())
    monkeypatch.undo()
    active = table.reload().completed_writes()
    assert _times(active.instants) == _times(completed[8:])
    assert _times(instants_with_archived(table)) == _times(completed)
    _assert_reads(path, before, "after a crash while deleting")
    # 27 commits left: nothing is due, the archived-and-active instants stay as they are (read once).
    assert archive(table, ArchivalPolicy()) == []
    # Once archival is due again it selects them again and writes only what the archive does not hold yet.
    client = WriteClient(ST, path, options=WriteOptions(max_file_records=20))
    for step in Workload(20, 4, 0.3, 0.0, partitions=2, seed=11).steps():
        client.apply(step)
    now = list(table.reload().completed_writes())
    before = _snapshot(path, [completed[16].requested_time, now[-1].requested_time])
    got = archive(table, ArchivalPolicy())
    assert _times(got) == _times(now[:11]) == _times(completed[8:19])
    assert _times(load_archived_instants(ST, path, table.config, completed_only=True)) == _times(completed[:19])
    assert _times(instants_with_archived(table)) == _times(completed[:8] + now)
    folder = join(path, table.config.history_folder)
    if version == 6:
        assert len(archive_log_files(ST, folder)) == 2
    else:
        assert [parse_lsm_file_name(n) for n in sorted(latest_manifest(ST, folder)[1].file_names)] == [
            (completed[0].requested_time, completed[14].requested_time, 0),
            (completed[15].requested_time, completed[18].requested_time, 0),
        ]
    _assert_reads(path, before, "after the next archival")


@pytest.mark.parametrize("version", [6, 9])
def test_an_instant_whose_metadata_does_not_decode_is_not_archived(
    version: int, tmp_path: Path, built: Callable[..., str]
) -> None:
    """The archive is where readers find an instant's metadata once its active files are gone: a damaged completed
    file is refused with its path, and nothing is archived or deleted."""
    path = built(tmp_path, version)
    table = HudiTable.open(ST, path)
    completed = list(table.reload().completed_writes())
    victim = completed[3]
    damaged = table.active.path_of(victim)
    Path(damaged).write_bytes(Path(damaged).read_bytes()[:40])  # a torn JSON document
    timeline_before = {p.name: p.read_bytes() for p in Path(path, ".hoodie").rglob("*") if p.is_file()}
    with pytest.raises(CorruptFileError) as info:
        archive(table, ArchivalPolicy())
    assert info.value.path == damaged and victim.requested_time in str(info.value)
    assert "does not decode" in str(info.value) and info.value.table == table.name
    timeline_after = {p.name: p.read_bytes() for p in Path(path, ".hoodie").rglob("*") if p.is_file()}
    assert timeline_after == timeline_before
