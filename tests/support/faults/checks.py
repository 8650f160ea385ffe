"""What a trial checks once the recovery pass has run, independently of the daemon's own view where it can: rows
through hudi-rs against the model of the completed writes, files on disk against the write stats of completed
instants, leftovers of temp files and pending instants."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tableservice.hudi.file_group.filenames import parse_base_file_name, parse_log_file_name
from tableservice.hudi.metadata.verify import verify_metadata_table
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import WRITE_ACTIONS
from tableservice.storage import Storage
from tests.support.faults.tables import COLUMNS
from tests.support.oracle import hudi_read
from tests.support.table_model import Row

META = ".hoodie"
MDT = os.path.join(".hoodie", "metadata")


@dataclass
class Findings:
    """Everything a trial found wrong after recovery (empty lists and zeros: nothing is lost)."""

    rows_lost: int = 0  # keys the model holds that the snapshot lacks
    rows_duplicated: int = 0  # extra copies of a key in the snapshot
    rows_changed: int = 0  # keys whose values differ from the model, or keys the model does not hold
    orphans: list[str] = field(default_factory=list)
    # Temp files a kill left between write and rename: counted, not a failure. No Hudi reader sees them (their
    # names match no base, log or instant file pattern; our listings skip them) and the timeline's are swept after
    # an hour; a temp file whose name a reader would take for a data file is an orphan.
    tmp_files: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    metadata_differences: list[str] = field(default_factory=list)
    read_error: str | None = None

    @property
    def clean(self) -> bool:
        return not (
            self.rows_lost
            or self.rows_duplicated
            or self.rows_changed
            or self.orphans
            or self.pending
            or self.metadata_differences
            or self.read_error
        )

    def summary(self) -> str:
        parts = [
            f"{name}={value}"
            for name, value in (
                ("lost", self.rows_lost),
                ("duplicated", self.rows_duplicated),
                ("changed", self.rows_changed),
                ("orphans", self.orphans[:5]),
                ("tmp", self.tmp_files[:5]),
                ("pending", self.pending),
                ("metadata", self.metadata_differences[:5]),
                ("read_error", self.read_error),
            )
            if value
        ]
        return ", ".join(parts) or "clean"


def _key(row: Row) -> tuple[Any, Any]:
    return (row["city"], row["uuid"])


def compare_rows(snapshot: list[Row], model: list[Row], out: Findings) -> None:
    """Rows by (partition, record key) and values: lost, duplicated, changed."""
    counts = Counter(_key(r) for r in snapshot)
    expected = {_key(r): r for r in model}
    out.rows_duplicated = sum(n - 1 for n in counts.values() if n > 1)
    out.rows_lost = sum(1 for k in expected if k not in counts)
    seen = {_key(r): r for r in snapshot}
    out.rows_changed = sum(1 for k, r in seen.items() if expected.get(k) != r)


def data_files(root: Path) -> set[str]:
    """Relative paths of the table's data files and of its metadata table's, timeline folders left out."""
    out = set()
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if not p.is_file() or p.name.startswith((".tmp-", ".hoodie_partition_metadata")):
            continue
        parts = rel.parts
        if parts[0] == META and (len(parts) < 3 or parts[1] != "metadata" or parts[2] == META):
            continue  # the timeline, hoodie.properties, heartbeats, markers: not data files
        out.add(str(rel))
    return out


def _named_by_completed(storage: Storage, base: str) -> set[str]:
    """File names the write stats of completed write instants name (data table or metadata table)."""
    table = HudiTable.open(storage, base)
    names: set[str] = set()
    for instant in table.timeline().completed():
        if instant.action not in WRITE_ACTIONS:
            continue
        md = table.commit_metadata(instant)
        for stats in (md.partition_to_write_stats or {}).values():
            names.update(os.path.basename(s.path) for s in stats if s.path)
    return names


def find_orphans(root: Path, before: set[str]) -> list[str]:
    """Data files that appeared during the trial and that no completed instant names."""
    storage = Storage()
    named = _named_by_completed(storage, str(root))
    mdt_done: set[str] = set()
    if (root / MDT / META).is_dir():
        named |= _named_by_completed(storage, str(root / MDT))
        mdt_done = {i.requested_time for i in HudiTable.open(storage, str(root / MDT)).timeline().completed()}

    def initial_log(f: str) -> bool:
        """A metadata partition's initial log file (a delete block without keys, one per file group), written at
        the partition's initialisation instant outside the write stats, as Hudi does: named by a completed
        instant of the metadata timeline."""
        parsed = parse_log_file_name(os.path.basename(f))
        return f.startswith(f"{MDT}/") and parsed is not None and parsed.instant_time in mdt_done

    new = data_files(root) - before
    return sorted(f for f in new if os.path.basename(f) not in named and not initial_log(f))


def tmp_leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".tmp-*"))


def pending_instants(root: Path) -> list[str]:
    """Instants still requested or inflight (data table and metadata table): after a recovery pass nobody owns
    them."""
    storage = Storage()
    table = HudiTable.open(storage, str(root))
    out = [f"{i.requested_time} {i.action.value} {i.state.name}" for i in table.timeline().pending()]
    if (root / MDT / META).is_dir():
        mdt = HudiTable.open(storage, str(root / MDT))
        out += [f"metadata {i.requested_time} {i.action.value} {i.state.name}" for i in mdt.timeline().pending()]
    return out


def check_table(root: Path, model: list[Row], before: set[str]) -> Findings:
    out = Findings()
    try:
        table = hudi_read(str(root), columns=COLUMNS)
        snapshot = [{c: r[c] for c in COLUMNS} for r in table.select(COLUMNS).to_pylist()]
        compare_rows(snapshot, model, out)
    except Exception as e:  # the oracle cannot read the table: reported, never hidden
        out.read_error = f"{type(e).__name__}: {e}"
    out.orphans = find_orphans(root, before)
    out.tmp_files = tmp_leftovers(root)
    out.orphans += [
        f
        for f in out.tmp_files
        if parse_base_file_name(os.path.basename(f)) or parse_log_file_name(os.path.basename(f))
    ]
    out.pending = pending_instants(root)
    out.metadata_differences = [str(d) for d in verify_metadata_table(HudiTable.open(Storage(), str(root)))]
    return out
