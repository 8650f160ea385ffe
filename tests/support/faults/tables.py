"""The tiny tables the fault trials run on: one template per service, built once (in-process, write client) and
copied per trial, each with the model of the rows its completed writes produced and the daemon configuration that
makes exactly that service act on it."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from tableservice.hudi.metadata.initialize import initialize_metadata_table
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.write import handles
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import TRIP_SCHEMA, Workload
from tableservice.planning.metadata.policy import MetadataPolicy
from tableservice.service.metadata import maintain_metadata_table
from tableservice.storage import Storage
from tests.support.table_model import Row, TableModel
from tests.support.trip_tables import create_trip_table

COLUMNS = TRIP_SCHEMA.names
SECTIONS = ("compaction", "clustering", "clean", "archival", "failed_writes", "metadata", "indexing")


@dataclass(frozen=True)
class ServiceSpec:
    """One service under test: how its template is written and the policy section that makes it act."""

    name: str
    table_type: TableType
    commits: int
    section: str
    policy: str  # YAML mapping (flow style) for the section
    spark: bool
    failed_write: bool = False  # the template ends with a write that died half-way
    mdt_compacted: bool = False  # the metadata table compacted after the writes (data archival waits for it)
    others: tuple[tuple[str, str], ...] = ()  # (section, keys) for sections switched off, e.g. the cleaner's
    # retention, which archival obeys


SERVICES: dict[str, ServiceSpec] = {
    s.name: s
    for s in (
        ServiceSpec(
            "compaction", TableType.MERGE_ON_READ, 4, "compaction", "{hoodie.compact.inline.max.delta.commits: 2}", True
        ),
        ServiceSpec(
            "clustering",
            TableType.MERGE_ON_READ,
            3,
            "clustering",
            "{schedule: true, hoodie.clustering.async.max.commits: 2, "
            "hoodie.clustering.plan.strategy.sort.columns: fare}",
            True,
        ),
        ServiceSpec(
            "clean",
            TableType.COPY_ON_WRITE,
            5,
            "clean",
            "{hoodie.cleaner.commits.retained: 1, hoodie.clean.max.commits: 1}",
            False,
        ),
        ServiceSpec(
            "archival",
            TableType.COPY_ON_WRITE,
            9,
            "archival",
            "{hoodie.keep.min.commits: 2, hoodie.keep.max.commits: 4}",
            False,
            mdt_compacted=True,
            others=(("clean", "hoodie.cleaner.commits.retained: 1"),),
        ),
        ServiceSpec(
            "rollback",
            TableType.MERGE_ON_READ,
            3,
            "failed_writes",
            "{hoodie.cleaner.policy.failed.writes: EAGER}",
            False,
            failed_write=True,
        ),
        ServiceSpec(
            "metadata", TableType.MERGE_ON_READ, 6, "metadata", "{hoodie.metadata.compact.max.delta.commits: 3}", False
        ),
        ServiceSpec(
            "indexing", TableType.MERGE_ON_READ, 3, "indexing", "{hoodie.metadata.record.index.enable: true}", True
        ),
    )
}


@dataclass(frozen=True)
class Template:
    """A built table that trials copy, and what its completed writes hold."""

    service: ServiceSpec
    path: Path
    rows: list[Row]  # the model's snapshot: TableModel.snapshot(COLUMNS)


def _failing_write(client: WriteClient, step: Any) -> None:
    """Apply `step` with its second log-file write failing: the write stays inflight with files written."""
    real = handles.write_log_file
    calls = {"n": 0}

    def dying(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("writer died (fault harness)")
        return real(*args, **kwargs)

    handles.write_log_file = dying  # type: ignore[assignment]
    try:
        client.apply(step)
    except OSError:
        pass
    else:
        raise AssertionError("the failing write of the rollback template completed")
    finally:
        handles.write_log_file = real  # type: ignore[assignment]


def build_template(spec: ServiceSpec, path: Path, *, records: int = 120, seed: int = 11) -> Template:
    """Write the service's template table at `path` (replacing what is there)."""
    if path.exists():
        shutil.rmtree(path)
    storage = Storage()
    create_trip_table(str(path), 9, spec.table_type, storage=storage)
    initialize_metadata_table(HudiTable.open(storage, str(path)), ("files",))
    client = WriteClient(storage, str(path), options=WriteOptions(max_file_records=30))
    model = TableModel("uuid", "city", "ts", event_time=True)
    steps = list(Workload(records, spec.commits + 1, 0.3, 0.05, partitions=2, seed=seed).steps())
    for step in steps[: spec.commits]:
        client.apply(step)
        model.upsert(step.records)
        if step.deletes is not None:
            model.delete(step.deletes)
    if spec.mdt_compacted:
        policy = MetadataPolicy.from_mapping({"hoodie.metadata.compact.max.delta.commits": "1"})
        maintain_metadata_table(HudiTable.open(storage, str(path)), policy)
    if spec.failed_write:
        _failing_write(client, steps[spec.commits])
    return Template(spec, path, model.snapshot(COLUMNS))


def config_text(spec: ServiceSpec, table: str, *, extra: str = "") -> str:
    """The daemon configuration of a trial: every service off except the one under test."""
    others = dict(spec.others)

    def section(name: str) -> str:
        if name == spec.section:
            return spec.policy[:-1] + ", enabled: true}"
        return f"{{enabled: false, {others[name]}}}" if name in others else "{enabled: false}"

    sections = "\n".join(f"  {s}: {section(s)}" for s in SECTIONS)
    return f"""\
service:
  retry: {{initial_backoff_seconds: 1, max_backoff_seconds: 5}}
  http: {{host: 127.0.0.1, port: 0}}
  log: {{level: WARNING}}
spark:
  master: "local[1]"
  conf:
    spark.ui.enabled: "false"
    spark.sql.shuffle.partitions: "1"
    spark.driver.memory: 1g
    spark.driver.extraJavaOptions: "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # a faster start for short passes
defaults:
{sections}
tables:
  - uri: {table}
    name: t
{extra}"""


def copy_table(template: Path, dest: Path) -> Path:
    shutil.copytree(template, dest, symlinks=True, copy_function=shutil.copy2)
    return dest


def read_rows(path: str, reader: Callable[..., pa.Table]) -> list[Row]:
    """Rows of the table's snapshot (model columns) as the oracle `reader` reads them."""
    table = reader(path, columns=COLUMNS)
    return [{c: r[c] for c in COLUMNS} for r in table.select(COLUMNS).to_pylist()]
