"""`tableservice history`: the actions the daemon ran (outcome, duration, what each read, wrote, deleted and
archived, the error of a failed one), newest first, as the running daemon serves them at `/history`, or with
`--offline` read from its history file (`service.history.path`)."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.parse
from collections.abc import Callable
from typing import Any

from tableservice.cli import status_cmd
from tableservice.config import DaemonConfig, load_config
from tableservice.errors import ConfigError, HistoryError
from tableservice.service.history import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    ActionHistory,
    answer_query,
    history_path,
    parse_since,
)


def register(sub: Any) -> None:
    history = sub.add_parser(
        "history",
        help="the actions the daemon ran, newest first (from its /history; --offline reads its history file)",
    )
    history.add_argument("--config", required=True, help="the daemon's configuration file")
    history.add_argument("--table", help="only this table (its name as /status shows it)")
    history.add_argument(
        "--since", help="only actions that ended since: an ISO-8601 date-time (UTC unless it says), unix seconds, "
        "or a duration such as 7d, 12h, 30m"
    )  # fmt: skip
    history.add_argument(
        "--limit", type=int, default=DEFAULT_LIMIT, help=f"at most this many (default {DEFAULT_LIMIT})"
    )
    history.add_argument("--json", action="store_true", help="print the /history document as JSON")
    history.add_argument("--url", help="where the daemon listens (default: service.http of the configuration)")
    history.add_argument(
        "--offline", action="store_true", help="read the history file instead of asking the running daemon"
    )
    history.set_defaults(handler=cmd_history)


def cmd_history(args: argparse.Namespace) -> int:
    if args.since is not None:
        try:
            parse_since(args.since)
        except ValueError as e:
            print(f"tableservice history: --{e}", file=sys.stderr)
            return 2
    if not 1 <= args.limit <= MAX_LIMIT:
        print(f"tableservice history: --limit must be 1 to {MAX_LIMIT}, got {args.limit}", file=sys.stderr)
        return 2
    config = load_config(args.config)
    params = {"table": args.table, "since": args.since, "limit": str(args.limit)}
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    document = ask(config, args, "/history", query, answer_query, listing="actions")
    render(document, as_json=args.json)
    return 0


def ask(
    config: DaemonConfig,
    args: argparse.Namespace,
    route: str,
    query: str,
    answer: Callable[[ActionHistory, str], tuple[int, dict[str, Any]]],
    *,
    listing: str,
) -> dict[str, Any]:
    """The running daemon's answer at `route?query`, or with `--offline` the same answer computed from its history
    file; the document must hold a list under `listing`."""
    if args.offline:
        store = ActionHistory(history_path(config.service.history), read_only=True)
        try:
            code, document = answer(store, query)
        finally:
            store.close()
        if code != 200:
            raise HistoryError(str(document.get("error")))
        return document
    url = status_cmd.daemon_url(config, args.url)
    fetched = status_cmd.fetch_json(config, url, f"{route}?{query}", offline="reads its history file instead")
    if not isinstance(fetched, dict) or not isinstance(fetched.get(listing), list):
        raise ConfigError(f"the daemon at {url} sent a {route} without a list of {listing}")
    return fetched


def render(document: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        json.dump(document, sys.stdout, indent=2, default=str)
        print()
        return
    actions = [a for a in document.get("actions", []) if isinstance(a, dict)]
    if not actions:
        print("no actions recorded" + (f" for {document['table']}" if document.get("table") else ""))
        return
    for a in actions:
        print(
            f"{a.get('end')}  {a.get('table')}  {a.get('action')} {a.get('instant') or '-'}  {a.get('outcome')}  "
            f"{float(a.get('duration_seconds') or 0):.1f}s{_effects(a)}"
        )
        if a.get("error"):
            print(f"  {a['error']}")


def _effects(a: dict[str, Any]) -> str:
    parts = []
    if a.get("records_read") or a.get("records_written"):
        parts.append(f"rows {a.get('records_read', 0)} read, {a.get('records_written', 0)} written")
    if a.get("bytes_read") or a.get("bytes_written"):
        parts.append(f"bytes {a.get('bytes_read', 0)} read, {a.get('bytes_written', 0)} written")
    if a.get("files_deleted"):
        parts.append(f"{a['files_deleted']} files deleted ({a.get('bytes_deleted', 0)} bytes)")
    if a.get("instants_archived"):
        parts.append(f"{a['instants_archived']} instants archived")
    if a.get("failed_writes_rolled_back"):
        parts.append(f"{a['failed_writes_rolled_back']} failed writes rolled back")
    if a.get("spark_seconds"):
        parts.append(f"Spark {float(a['spark_seconds']):.1f}s")
    if a.get("file_groups_before"):
        parts.append(
            f"{a['file_groups_before']} file groups read from {a.get('files_before', 0)} files -> "
            f"{a.get('file_groups_after', 0)} from {a.get('files_after', 0)}"
        )
    return "".join(f"; {p}" for p in parts)
