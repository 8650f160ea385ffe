"""The table the fault runs print: per service and fault class, trials, faults that fired, rows lost, duplicated
and changed, clean recoveries, leftovers, (damaged files) errors that named the file and (S3 faults) passes that
ended in an untyped error, (ZooKeeper) passes that wrote a completed instant after their lock was marked lost."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.support.faults.harness import TrialResult

HEADER = (
    "service",
    "fault",
    "trials",
    "fired",
    "lost",
    "dup",
    "changed",
    "recovered",
    "orphans",
    "tmp",
    "pending",
    "mdt",
    "rec.err",
    "named",
    "untyped",
    "late",
)


def rows(results: Sequence[TrialResult]) -> list[tuple[str, ...]]:
    cells: dict[tuple[str, str], list[TrialResult]] = {}
    for r in results:
        cells.setdefault((r.service, r.fault), []).append(r)
    out: list[tuple[str, ...]] = []
    for (service, fault), group in sorted(cells.items()):
        named = [r.named_file for r in group if r.named_file is not None]
        out.append(
            (
                service,
                fault,
                str(len(group)),
                str(sum(r.fired for r in group)),
                str(sum(r.findings.rows_lost for r in group)),
                str(sum(r.findings.rows_duplicated for r in group)),
                str(sum(r.findings.rows_changed for r in group)),
                str(sum(r.recovered for r in group)),
                str(sum(bool(r.findings.orphans) for r in group)),
                str(sum(bool(r.findings.tmp_files) for r in group)),
                str(sum(bool(r.findings.pending) for r in group)),
                str(sum(bool(r.findings.metadata_differences) for r in group)),
                str(sum(r.recovery_error is not None for r in group)),
                f"{sum(named)}/{len(named)}" if named else "-",
                str(sum(r.typed is False for r in group)),
                str(sum(bool(r.late_commits) for r in group)),
            )
        )
    return out


def format_table(results: Sequence[TrialResult]) -> str:
    body = rows(results)
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(HEADER)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i >= 2 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(HEADER), line(tuple("-" * w for w in widths)), *(line(r) for r in body)])


def print_table(results: Sequence[TrialResult]) -> None:
    print()
    print(format_table(results))
    for r in results:
        if not r.ok:
            print(f"  {'NOT RECOVERED' if not r.recovered else 'UNTYPED ERROR'}: {r.describe()}")
        elif r.late_commits:
            print(f"  COMPLETED AFTER THE LOCK WAS MARKED LOST: {r.describe()}")
