"""`tableservice lock status|acquire`: look at and hold a table's lock, for operator drills."""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from typing import Any

from tableservice.cli.locations import absolute_location
from tableservice.config import load_config, resolve_named_tables
from tableservice.config.locks import LockSettings
from tableservice.errors import ConfigError
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.service.wiring import lock_provider, storage_options
from tableservice.storage import Storage


def register(sub: Any) -> None:
    lock = sub.add_parser("lock", help="inspect or hold a table's lock (operator drills)")
    lsub = lock.add_subparsers(dest="lock_command", required=True)
    status = lsub.add_parser("status", help="who holds the table's lock, and since when")
    status.add_argument("--config", required=True)
    status.add_argument("--table", required=True, help="the table's name (as configured, or hoodie.table.name)")
    status.set_defaults(handler=cmd_status)
    acquire = lsub.add_parser("acquire", help="take the table's lock and hold it")
    acquire.add_argument("--config", required=True)
    acquire.add_argument("--table", required=True)
    acquire.add_argument("--hold", type=float, required=True, help="seconds to hold the lock")
    acquire.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the lock (default 60)")
    acquire.set_defaults(handler=cmd_acquire)


def _resolve(config_path: str, name: str) -> tuple[LockSettings, HudiTable]:
    """The table's effective lock settings (with its overrides) and the table."""
    config = load_config(config_path)
    storage = Storage(storage_options(config))
    entries = resolve_named_tables(config.resolve_tables(storage), storage)
    for entry in entries:
        if name in (entry.name, entry.uri) or absolute_location(name) == entry.uri:
            return config.effective_locks(entry), HudiTable.open(storage, entry.uri, label=entry.name)
    # Hudi's own name is accepted too when exactly one table carries it
    tables = [(e, HudiTable.open(storage, e.uri, label=e.name)) for e in entries]
    matches = [(e, t) for e, t in tables if t.name == name]
    if len(matches) == 1:
        entry, table = matches[0]
        return config.effective_locks(entry), table
    if matches:
        listed = ", ".join(f"{e.name} ({e.uri})" for e, _ in matches)
        raise ConfigError(f"--table {name!r}: several tables have that hoodie.table.name: {listed}; use their names")
    raise ConfigError(f"--table {name!r}: no configured or discovered table has that name")


def cmd_status(args: argparse.Namespace) -> int:
    settings, table = _resolve(args.config, args.table)
    provider = lock_provider(settings)
    try:
        holder = provider.table_lock(table.name, table.base_path).holder()
    finally:
        provider.close()
    if holder is None:
        print(f"{table.name}: lock is free ({provider.name})")
        return 0
    owner, since = holder
    stamp = datetime.fromtimestamp(since, UTC).isoformat(timespec="seconds")
    print(f"{table.name}: held by {owner} since {stamp} ({time.time() - since:.0f}s, {provider.name})")
    return 0


def cmd_acquire(args: argparse.Namespace) -> int:
    settings, table = _resolve(args.config, args.table)
    provider = lock_provider(settings)
    try:
        lock = provider.table_lock(table.name, table.base_path)
        handle = lock.acquire(args.wait)
        print(f"{table.name}: acquired as {handle.owner}; holding for {args.hold:.0f}s", flush=True)
        try:
            deadline = time.monotonic() + args.hold
            while time.monotonic() < deadline:
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
                if handle.lost:
                    print(f"{table.name}: the lock was lost while held")
                    return 1
        finally:
            lock.release(handle)
        print(f"{table.name}: released")
        return 0
    finally:
        provider.close()
