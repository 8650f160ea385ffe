"""`tableservice plan cancel URI --instant T`: remove a compaction, clustering or clean plan nobody has started.

Under the table lock (the `--config` lock provider for the table, else in-process) and the plan's executor lease
(a plan a daemon is about to run is refused), through the commit path (`tableservice.hudi.action.cancel`). An
inflight plan is refused: its attempt must be rolled back, which the daemon or `<service> run` does.
"""

from __future__ import annotations

import argparse
from typing import Any

from tableservice.cli.operator import add_table_arguments, operator_table
from tableservice.hudi.action.cancel import cancel_plan, cancellable


def register(sub: Any) -> None:
    plan = sub.add_parser("plan", help="operator commands on pending plans")
    psub = plan.add_subparsers(dest="plan_command", required=True)
    cancel = psub.add_parser("cancel", help="remove a requested (not yet started) compaction, clustering or clean plan")
    add_table_arguments(cancel)
    cancel.add_argument("--instant", required=True, help="the plan's instant time")
    cancel.set_defaults(handler=cmd_cancel)


def cmd_cancel(args: argparse.Namespace) -> int:
    with operator_table(args) as op:
        table = op.table
        _, service = cancellable(table, table.reload(), args.instant)
        with op.lease(service, args.instant) as lease:
            removed = cancel_plan(table, args.instant, lock=op.context.lock_factory(), lease=lease)
    print(f"cancelled {service} {removed.requested_time}: {table.active.path_of(removed)} removed")
    return 0
