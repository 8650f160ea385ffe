"""The `tableservice` command line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

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
    service_cmd,
    table_cmd,
)
from tableservice.cli.locations import resolve_locations
from tableservice.cli.logsetup import RedactingFormatter
from tableservice.errors import ConfigError, InvalidTimeTravelError, TableServiceError

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tableservice", description="Table services for Apache Hudi tables.")
    parser.add_argument("--version", action="version", version=f"tableservice {__version__}")
    parser.add_argument("--log-level", default="WARNING", help="logging level (default: WARNING)")
    sub = parser.add_subparsers(dest="command", required=True)
    daemon_cmd.register(sub)
    history_cmd.register(sub)
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
    args = parser.parse_args(argv)
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
        print(f"tableservice: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
