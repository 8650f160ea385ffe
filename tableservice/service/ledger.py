"""The cost ledger: what table services cost per table and per service, and what they bought.

Every action's history record (`service/history.py`) carries its cost (Spark job seconds, the tasks' executor
seconds, object-store requests by kind) and its benefit (the read path of the file groups it rewrote: files a
reader opens and log files and bytes it merges, before and after). The ledger sums them per table and service
over a window and, with `service.cost` prices, turns them into money. Served at /report and printed by
`tableservice report`.
"""

from __future__ import annotations

from typing import Any

from tableservice.config import CostSettings
from tableservice.config.cost import REQUEST_KINDS
from tableservice.errors import HistoryError
from tableservice.service.history import SUMMED_COLUMNS, ActionHistory, iso_time, parse_query

__all__ = ["REQUEST_KINDS", "answer_report", "ledger"]

# `ActionHistory.totals` gives the counts of actions and the sum of every numeric column; requests are grouped below.
_SUMMED = ("actions", "completed", "failed", *sorted(c for c in SUMMED_COLUMNS if not c.startswith("requests_")))


def _entry(totals: dict[str, Any], prices: CostSettings) -> dict[str, Any]:
    """One ledger line from summed history columns: requests grouped by kind, read amplification (files a
    reader opens per file group) before and after, and the money when prices are set."""
    out: dict[str, Any] = {k: totals.get(k, 0) for k in _SUMMED}
    out["requests"] = {kind: int(totals.get(f"requests_{kind}", 0)) for kind in REQUEST_KINDS}
    out["executor_hours"] = round(out["executor_seconds"] / 3600, 6)
    groups_before, groups_after = out["file_groups_before"], out["file_groups_after"]
    out["read_amplification_before"] = round(out["files_before"] / groups_before, 3) if groups_before else None
    out["read_amplification_after"] = round(out["files_after"] / groups_after, 3) if groups_after else None
    if prices.priced:
        executor = out["executor_hours"] * (prices.executor_hour or 0.0)
        requests = sum(out["requests"][k] / 1000 * prices.per_1000_requests.get(k, 0.0) for k in REQUEST_KINDS)
        out["cost"] = {
            "currency": prices.currency,
            "executor": round(executor, 6),
            "requests": round(requests, 6),
            "total": round(executor + requests, 6),
        }
    return out


def _add(into: dict[str, Any], row: dict[str, Any]) -> None:
    for key, value in row.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            into[key] = into.get(key, 0) + value


def ledger(totals: list[dict[str, Any]], prices: CostSettings) -> dict[str, Any]:
    """The report from `ActionHistory.totals` rows: per table, per service and the table's sum; and the sum of
    all tables."""
    tables: dict[str, dict[str, Any]] = {}
    sums: dict[str, dict[str, Any]] = {}
    overall: dict[str, Any] = {}
    for row in totals:
        name = str(row["table"])
        tables.setdefault(name, {"table": name, "services": {}})["services"][str(row["action"])] = _entry(row, prices)
        _add(sums.setdefault(name, {}), row)
        _add(overall, row)
    for name, table in tables.items():
        table["total"] = _entry(sums[name], prices)
    return {
        "tables": [tables[name] for name in sorted(tables)],
        "total": _entry(overall, prices),
        "priced": prices.priced,
    }


def answer_report(
    history: ActionHistory, query: str, prices: CostSettings, now: float | None = None
) -> tuple[int, dict[str, Any]]:
    """The /report answer to `query` (`table`, `since`): (HTTP status, JSON document). Blocking (reads the file)."""
    parsed = parse_query(query, ("table", "since"), now)
    if isinstance(parsed, str):
        return 400, {"error": parsed}
    try:
        totals = history.totals(table=parsed["table"], since=parsed["since"])
    except HistoryError as e:
        return 503, {"error": str(e)}
    document = ledger(totals, prices)
    document["since"] = None if parsed["since"] is None else iso_time(parsed["since"])
    document["table"] = parsed["table"]
    return 200, document
