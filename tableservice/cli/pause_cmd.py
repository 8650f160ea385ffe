"""`tableservice pause|resume --config FILE --table NAME`: stop and restart a table's actions through its entry in
the daemon's configuration file (`paused: true`, `paused_reason`), edited in place (`tableservice.config.pause`).

The running daemon reloads the file when it changes: a paused table is still polled (/status, pending metrics) but
runs no action; an action already running finishes. `tableservice status` and /status show `paused` and the reason,
the metric `tableservice_table_paused{table}` is 1.
"""

from __future__ import annotations

import argparse
from typing import Any

from tableservice.config.pause import set_paused


def register(sub: Any) -> None:
    pause = sub.add_parser("pause", help="pause a table: the daemon polls it but runs no action (edits --config)")
    pause.add_argument("--config", required=True, help="the daemon's YAML file (edited in place)")
    pause.add_argument("--table", required=True, help="the table's name or uri in the file")
    pause.add_argument("--reason", required=True, help="why (shown on /status and by `tableservice status`)")
    pause.set_defaults(handler=cmd_pause)
    resume = sub.add_parser("resume", help="resume a paused table (edits --config)")
    resume.add_argument("--config", required=True, help="the daemon's YAML file (edited in place)")
    resume.add_argument("--table", required=True, help="the table's name or uri in the file")
    resume.set_defaults(handler=cmd_resume)


def cmd_pause(args: argparse.Namespace) -> int:
    done = set_paused(args.config, args.table, True, args.reason)
    label = done.table.name or done.table.uri
    if not done.changed:
        print(f"{label} is already paused: {done.table.paused_reason}")
        return 0
    print(f"paused {label} in {args.config}: {done.table.paused_reason}")
    print("the daemon runs no action for it once it has reloaded the file (on change); a running action finishes")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    done = set_paused(args.config, args.table, False)
    label = done.table.name or done.table.uri
    print(f"{label} was not paused" if not done.changed else f"resumed {label} in {args.config}")
    return 0
