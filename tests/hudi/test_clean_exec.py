"""Clean execution: crashes and re-runs, failed deletes, plans from elsewhere or naming paths outside the table,
partitions emptied by the clean."""

from __future__ import annotations

import posixpath
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from tableservice.errors import InvalidPlanError, StorageError
from tableservice.hudi.action.clean import dry_run, execute_clean
from tableservice.hudi.models import (
    HoodieCleanerPlan,
    HoodieCleanFileInfo,
    decode_cleaner_plan,
    encode_cleaner_plan,
)
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.schema import avro_schema_from_arrow
from tableservice.hudi.timeline.instant import Action, Instant, State
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.create import TableSpec, create_table
from tableservice.hudi.write.workload import TRIP_SCHEMA, Workload
from tableservice.planning.clean.plan import (
    CleanPolicy,
    clean_due,
)
from tableservice.storage import Storage
from tests.support.clean_helpers import (
    SF,
    SP,
    build_all,
    copy_of,
    create,
    data_files,
    delete_partition,
    expected_files,
    ledger,
    plan_relative,
    scheduled,
)
from tests.support.oracle import hudi_read, sort_rows
from tests.support.servers import MotoServer
from tests.support.trip_tables import create_trip_table


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, TableType], str]:
    return build_all(tmp_path_factory.mktemp("clean_tables"))


# --- execution: crashes, failures, foreign plans ---------------------------------------------------


@pytest.mark.parametrize("version", [6, 9])
def test_crash_during_execution_then_rerun_gives_the_same_result(
    built: dict[tuple[int, TableType], str], version: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = (version, TableType.MERGE_ON_READ)
    path = copy_of(built, case, tmp_path)
    reference = str(tmp_path / "copy" / "t")  # the same table name: plans map by the part after it
    policy = CleanPolicy(commits_retained=2)
    table, instant, plan = scheduled(path, policy)
    shutil.copytree(path, reference)
    expected = plan_relative(path, plan)
    assert len(expected) > 4

    real = Storage.delete
    calls = {"n": 0}

    def crashing(self: Storage, location: str, *, missing_ok: bool = True) -> bool:
        calls["n"] += 1
        if calls["n"] > 3:
            raise RuntimeError("process killed")
        return real(self, location, missing_ok=missing_ok)

    monkeypatch.setattr(Storage, "delete", crashing)
    files_before = data_files(path)
    with pytest.raises(RuntimeError, match="killed"):
        execute_clean(table, instant, parallelism=1)
    monkeypatch.undo()
    assert len(files_before - data_files(path)) == 3
    assert files_before - data_files(path) <= expected, "the crash came after deletes of planned files only"
    state = HudiTable.open(Storage(), path).reload().get(instant.requested_time)
    assert state is not None and state.state is State.INFLIGHT
    inflight = Path(table.active.path_of(state)).read_bytes()
    if version == 6:  # Hudi 0.x writes the plan into the inflight file, 1.x leaves it empty
        assert decode_cleaner_plan(inflight, path="inflight") == plan
    else:
        assert inflight == b""

    md = execute_clean(HudiTable.open(Storage(), path), state)
    ref = execute_clean(HudiTable.open(Storage(), reference), instant)
    assert data_files(path) == data_files(reference) == files_before - expected
    assert md.total_files_deleted == ref.total_files_deleted == len(expected)
    assert (
        set(md.partition_metadata)
        == set(ref.partition_metadata)
        == set(plan.file_paths_to_be_deleted_per_partition or {})
    )
    for p, pm in md.partition_metadata.items():
        other = ref.partition_metadata[p]
        assert set(pm.success_delete_files) == set(other.success_delete_files)
        assert pm.failed_delete_files == other.failed_delete_files == ()
    again = execute_clean(HudiTable.open(Storage(), path), state)  # completed: the metadata as written
    assert again.total_files_deleted == md.total_files_deleted and again.partition_metadata == md.partition_metadata


def test_failed_delete_is_recorded_and_planned_again(
    built: dict[tuple[int, TableType], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = copy_of(built, (9, TableType.COPY_ON_WRITE), tmp_path)
    policy = CleanPolicy(commits_retained=2)
    table, instant, plan = scheduled(path, policy)
    victim_rel = sorted(plan_relative(path, plan))[0]
    victim = f"{path}/{victim_rel}"
    real = Storage.delete

    def failing(self: Storage, location: str, *, missing_ok: bool = True) -> bool:
        if location == victim:
            raise StorageError("permission denied", path=location)
        return real(self, location, missing_ok=missing_ok)

    monkeypatch.setattr(Storage, "delete", failing)
    md = execute_clean(table, instant)
    monkeypatch.undo()
    partition, name = victim_rel.rsplit("/", 1)
    assert md.partition_metadata[partition].failed_delete_files == (name,)
    assert name not in md.partition_metadata[partition].success_delete_files
    assert md.total_files_deleted == len(plan_relative(path, plan)) - 1
    assert Path(victim).exists()
    assert clean_due(table, None, policy)[0] is False  # no commit since
    _, retry_instant, retry = scheduled(path, policy)
    assert plan_relative(path, retry) == {victim_rel}
    execute_clean(HudiTable.open(Storage(), path), retry_instant)
    assert not Path(victim).exists()


def _write_plan(table: HudiTable, plan: HoodieCleanerPlan) -> Instant:
    t = table.active.new_instant_time(table.reload())
    return table.active.create_requested(t, Action.CLEAN, encode_cleaner_plan(plan, table_version=table.config.version))


def _plan_with(partition: str, paths: list[str]) -> HoodieCleanerPlan:
    return HoodieCleanerPlan(
        earliest_instant_to_retain=None,
        last_completed_commit_timestamp="",
        policy="KEEP_LATEST_COMMITS",
        files_to_be_deleted_per_partition={},
        version=2,
        file_paths_to_be_deleted_per_partition={
            partition: tuple(HoodieCleanFileInfo(file_path=p, is_bootstrap_base_file=False) for p in paths)
        },
        partitions_to_be_deleted=(),
        extra_metadata={},
    )


@pytest.mark.parametrize(
    "bad",
    [
        "file:/etc/hosts",
        "s3://elsewhere/bucket/x.parquet",
        "file:{path}/../t2/" + SF + "/x_0-0-0_20240101000000000.parquet",
        "file:{path}/.hoodie/hoodie.properties",
        "file:{path}/" + SP + "/{name}",
        "file:{path}/" + SF + "/.hoodie_partition_metadata",
        "file:{path}/" + SF + "/x\x00_0-0-0_20240101000000000.parquet",
        "file:{path}/" + SF + "\n/x_0-0-0_20240101000000000.parquet",
    ],
)
def test_plan_naming_a_path_outside_the_table_is_refused(
    built: dict[tuple[int, TableType], str], tmp_path: Path, bad: str
) -> None:
    path = copy_of(built, (8, TableType.COPY_ON_WRITE), tmp_path)
    table = HudiTable.open(Storage(), path)
    good = sorted(f for f in data_files(path) if f.startswith(SF + "/") and f.endswith(".parquet"))[0]
    plan = _plan_with(SF, [f"file:{path}/{good}", bad.format(path=path, name=posixpath.basename(good))])
    instant = _write_plan(table, plan)
    before = data_files(path)
    with pytest.raises(InvalidPlanError) as err:
        execute_clean(table, instant)
    assert err.value.path == table.active.path_of(instant)
    assert err.value.table == "t"
    assert data_files(path) == before
    current = table.reload().get(instant.requested_time)
    assert current is not None and current.state is State.REQUESTED


def test_plan_written_on_another_mount_resolves_into_the_table(
    built: dict[tuple[int, TableType], str], tmp_path: Path
) -> None:
    path = copy_of(built, (9, TableType.COPY_ON_WRITE), tmp_path)
    table = HudiTable.open(Storage(), path)
    _, _, plan = scheduled(path, CleanPolicy(commits_retained=2))
    table.active.delete_pending(table.reload().pending_of(Action.CLEAN).instants[0])
    moved = plan.model_copy(
        update={
            "file_paths_to_be_deleted_per_partition": {
                p: tuple(replace_path(fi, path, "s3a://other-bucket/warehouse/t") for fi in infos)
                for p, infos in (plan.file_paths_to_be_deleted_per_partition or {}).items()
            }
        }
    )
    instant = _write_plan(table, moved)
    assert set(dry_run(table, instant).locations()) == {f"{path}/{r}" for r in plan_relative(path, plan)}
    before = data_files(path)
    md = execute_clean(table, instant)
    assert data_files(path) == before - plan_relative(path, plan)
    assert md.total_files_deleted == len(plan_relative(path, plan))


def replace_path(fi: HoodieCleanFileInfo, path: str, other: str) -> HoodieCleanFileInfo:
    return HoodieCleanFileInfo(
        file_path=(fi.file_path or "").replace("file:" + path, other), is_bootstrap_base_file=False
    )


@pytest.mark.oracle
@pytest.mark.parametrize("version", [6, 9])
def test_partition_emptied_by_the_clean_is_deleted(tmp_path: Path, version: int) -> None:
    path = str(tmp_path / "t")
    client = create(path, version, TableType.MERGE_ON_READ)
    for step in Workload(120, 3, 0.3, 0.0, partitions=2, seed=4).steps():
        client.apply(step)
    delete_partition(path, SF)
    client.insert(
        next(iter(Workload(20, 1, partitions=0, seed=12).steps())).records.set_column(
            9, "city", pa.array(["sao_paulo"] * 20)
        )
    )
    before = hudi_read(path)
    assert SF not in set(before.column("_hoodie_partition_path").to_pylist())
    policy = CleanPolicy(commits_retained=1)
    table, instant, plan = scheduled(path, policy)
    assert plan.partitions_to_be_deleted == (SF,)
    assert {r.split("/")[0] for r in plan_relative(path, plan)} == {SF}
    md = execute_clean(table, instant)
    assert md.partition_metadata[SF].is_partition_deleted is True
    assert not (Path(path) / SF).exists()
    assert hudi_read(path).equals(before)


@pytest.mark.oracle
def test_non_partitioned_table_is_cleaned_and_its_base_path_kept(tmp_path: Path) -> None:
    storage = Storage()
    path = str(tmp_path / "t")
    spec = TableSpec(
        name="t",
        table_type=TableType.COPY_ON_WRITE,
        version=8,
        schema=avro_schema_from_arrow(TRIP_SCHEMA, "t_record", "hoodie.t"),
        record_key_fields=("uuid",),
        ordering_fields=("ts",),
    )
    create_table(storage, path, spec)
    client = WriteClient(storage, path, options=WriteOptions(max_file_records=50))
    steps = list(Workload(100, 4, 0.4, 0.0, partitions=0, seed=6).steps())
    for step in steps[:2]:
        client.apply(step)
    client.insert_overwrite(next(iter(Workload(30, 1, partitions=0, seed=77).steps())).records)
    for step in steps[2:]:
        client.apply(step)
    before = hudi_read(path)
    table, instant, plan = scheduled(path, CleanPolicy(commits_retained=1))
    assert set(plan.file_paths_to_be_deleted_per_partition or {}) == {""}
    assert plan.partitions_to_be_deleted == ()
    assert plan.extra_metadata == {}
    book = ledger(table)
    assert plan_relative(path, plan) == expected_files(book, book.completed[-1], None)
    md = execute_clean(table, instant)
    assert md.partition_metadata[""].is_partition_deleted is False
    assert Path(path, ".hoodie_partition_metadata").exists()
    assert hudi_read(path).equals(before)


@pytest.mark.moto
@pytest.mark.oracle
def test_clean_on_s3(s3_bucket: tuple[Storage, str], moto: MotoServer) -> None:
    storage, root = s3_bucket
    uri = f"{root}/warehouse/t"
    create_trip_table(uri, 9, TableType.COPY_ON_WRITE, storage=storage)
    client = WriteClient(storage, uri, options=WriteOptions(max_file_records=50))
    for step in Workload(100, 3, 0.4, 0.0, partitions=2, seed=9).steps():
        client.apply(step)
    delete_partition(uri, SF, storage)
    client.insert(_rows_in("sao_paulo", 13))
    before = _s3_read(uri, moto)
    table, instant, plan = scheduled(uri, CleanPolicy(commits_retained=1), storage)
    paths = [
        fi.file_path or "" for infos in (plan.file_paths_to_be_deleted_per_partition or {}).values() for fi in infos
    ]
    assert paths and all(p.startswith(uri + "/") for p in paths)
    assert plan.partitions_to_be_deleted == (SF,)
    md = execute_clean(table, instant)
    assert md.total_files_deleted == len(paths)
    assert not any(storage.exists(p) for p in paths)
    assert storage.list(f"{uri}/{SF}", recursive=True) == []
    assert md.partition_metadata[SF].is_partition_deleted is True
    assert _s3_read(uri, moto).equals(before)


def _rows_in(city: str, seed: int) -> pa.Table:
    rows = next(iter(Workload(20, 1, partitions=0, seed=seed).steps())).records
    return rows.set_column(rows.schema.get_field_index("city"), "city", pa.array([city] * rows.num_rows))


def _s3_read(uri: str, moto: MotoServer) -> pa.Table:
    from hudi import HudiReadOptions, HudiTableBuilder

    options = {
        "aws_endpoint_url": moto.endpoint_url,
        "aws_allow_http": "true",
        "aws_access_key_id": moto.access_key_id,
        "aws_secret_access_key": moto.secret_access_key,
        "aws_region": moto.region,
    }
    table = HudiTableBuilder.from_base_uri(uri).with_storage_options(options).build()
    return sort_rows(pa.Table.from_batches(table.read(HudiReadOptions())))
