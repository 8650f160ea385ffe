"""`tableservice report`: the cost ledger per table and service over a window (executor hours, object-store
requests by kind, bytes and rows, and what the actions bought: log files and bytes taken off the read path, read
amplification before and after), in money when `service.cost` sets prices. Asks the running daemon's /report,
or with `--offline` sums its history file."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.parse
from typing import Any

from tableservice.cli import history_cmd
from tableservice.config import load_config
from tableservice.service.history import parse_since
from tableservice.service.ledger import REQUEST_KINDS, answer_report


def register(sub: Any) -> None:
    report = sub.add_parser(
        "report", help="what table services cost per table and service, and what they bought (the cost ledger)"
    )
    report.add_argument("--config", required=True, help="the daemon's configuration file")
    report.add_argument("--since", default="7d", help="the window: a duration (7d, 12h), ISO-8601 date-time or unix "
                        "seconds (default: 7d)")  # fmt: skip
    report.add_argument("--table", help="only this table (its name as /status shows it)")
    report.add_argument("--json", action="store_true", help="print the /report document as JSON")
    report.add_argument("--url", help="where the daemon listens (default: service.http of the configuration)")
    report.add_argument("--offline", action="store_true", help="sum the history file instead of asking the daemon")
    report.set_defaults(handler=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    try:
        parse_since(args.since)
    except ValueError as e:
        print(f"tableservice report: --{e}", file=sys.stderr)
        return 2
    config = load_config(args.config)
    query = urllib.parse.urlencode({k: v for k, v in {"since": args.since, "table": args.table}.items() if v})
    document = history_cmd.ask(
        config, args, "/report", query, lambda store, q: answer_report(store, q, config.service.cost), listing="tables"
    )
    render(document, as_json=args.json)
    return 0


def _line(label: str, e: dict[str, Any]) -> str:
    requests = e.get("requests") or {}
    shown = " ".join(f"{k.upper()} {requests.get(k, 0)}" for k in REQUEST_KINDS if requests.get(k))
    parts = [
        f"{label:<14} {e.get('actions', 0)} actions ({e.get('failed', 0)} failed)",
        f"executor {float(e.get('executor_hours') or 0):.3f} h",
        f"Spark {float(e.get('spark_seconds') or 0):.0f} s",
        f"read {e.get('bytes_read', 0)} B, wrote {e.get('bytes_written', 0)} B",
        f"requests {shown or '0'}",
    ]
    if e.get("log_files_removed") or e.get("file_groups_before"):
        parts.append(f"log files off the read path {e.get('log_files_removed', 0)} ({e.get('log_bytes_removed', 0)} B)")
    before, after = e.get("read_amplification_before"), e.get("read_amplification_after")
    if before is not None and after is not None:
        parts.append(f"files per file group {before} -> {after}")
    if e.get("files_deleted"):
        parts.append(f"cleaned {e['files_deleted']} files ({e.get('bytes_deleted', 0)} B)")
    cost = e.get("cost")
    if isinstance(cost, dict):
        parts.append(f"cost {cost.get('total', 0):.4f} {cost.get('currency', '')}")
    return "; ".join(parts)


def render(document: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        json.dump(document, sys.stdout, indent=2, default=str)
        print()
        return
    since = document.get("since") or "the start of the history"
    tables = [t for t in document.get("tables", []) if isinstance(t, dict)]
    if not tables:
        print(f"no actions since {since}" + (f" for {document['table']}" if document.get("table") else ""))
        return
    print(f"since {since}:")
    for t in tables:
        print(t.get("table"))
        for service, entry in sorted((t.get("services") or {}).items()):
            print("  " + _line(service, entry))
        print("  " + _line("all services", t.get("total") or {}))
    if len(tables) > 1:
        print(_line("all tables", document.get("total") or {}))
    if not document.get("priced"):
        print("(no prices: set service.cost to see money)")
