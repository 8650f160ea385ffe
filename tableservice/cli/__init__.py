"""The `tableservice` command line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tableservice import __version__
from tableservice.cli import (
    daemon_cmd,
    demo_cmd,
    generate_cmd,
    history_cmd,
    index_cmd,
    lock_cmd,
    pause_cmd,
    plan_cmd,
    report_cmd,
    service_cmd,
    table_cmd,
)
from tableservice.cli.locations import resolve_locations
from tableservice.cli.logsetup import RedactingFormatter
from tableservice.cli.messages import describe
from tableservice.errors import ConfigError, InvalidTimeTravelError, TableServiceError

Handler = Callable[[argparse.Namespace], int]
#: Options of the whole program, accepted before or after the sub-command.
GLOBAL_OPTIONS = ("--log-level",)


class _Parser(argparse.ArgumentParser):
    """Every (sub-)command's --help shows the defaults."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(*args, **kwargs)


def hoist_global_options(argv: Sequence[str]) -> list[str]:
    """`argv` with the global options moved in front of the sub-command, wherever they were given."""
    front: list[str] = []
    rest: list[str] = []
    items = list(argv)
    i = 0
    while i < len(items):
        item = items[i]
        if item == "--":  # everything after belongs to the sub-command as it is
            rest.extend(items[i:])
            break
        name = item.split("=", 1)[0]
        if name in GLOBAL_OPTIONS:
            if "=" in item or i + 1 >= len(items):
                front.append(item)
            else:
                front.extend(items[i : i + 2])
                i += 1
        else:
            rest.append(item)
        i += 1
    return front + rest


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tableservice", description="Table services for Apache Hudi tables.")
    parser.add_argument("--version", action="version", version=f"tableservice {__version__}")
    parser.add_argument("--log-level", default="WARNING", help="logging level, before or after the sub-command")
    sub = parser.add_subparsers(dest="command", required=True)
    daemon_cmd.register(sub)
    history_cmd.register(sub)
    report_cmd.register(sub)
    table_cmd.register(sub)
    generate_cmd.register(sub)
    demo_cmd.register(sub)
    lock_cmd.register(sub)
    service_cmd.register(sub)
    index_cmd.register(sub)
    plan_cmd.register(sub)
    pause_cmd.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(hoist_global_options(sys.argv[1:] if argv is None else argv))
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])
    resolve_locations(args)
    command: Handler = args.handler
    try:
        return command(args)
    except ConfigError as e:
        print(f"tableservice: configuration error: {e}", file=sys.stderr)
        return 2
    except InvalidTimeTravelError as e:
        where = f" (table {e.table})" if e.table else ""
        print(f"tableservice: {e.problem}{where}", file=sys.stderr)
        return 2
    except TableServiceError as e:
        print(f"tableservice: {describe(e)}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
