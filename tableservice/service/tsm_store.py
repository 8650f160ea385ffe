"""The tables registered through the table-service-manager endpoint (`service/tsm.py`), kept in the daemon's state
store: a table `tsm_registrations` in the SQLite file of the action history (`service/history.py`), so that a
registration survives a restart and the daemon serves the table from its next start on.

One row per table, keyed by its normalised base path: who registered it (Hudi's `username`), the queue, resources,
parallelism, extra parameters and execution engine the writer asked for (kept as given: hints, shown in /status;
the daemon runs every action on its own Spark session), and when it was registered and last updated. The
history's pruning never touches this table.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from tableservice.errors import StateStoreError

__all__ = ["Registration", "Registrations"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tsm_registrations (
    base_path TEXT PRIMARY KEY,
    db_name TEXT,
    table_name TEXT,
    owner TEXT,
    queue TEXT,
    resources TEXT,
    parallelism INTEGER,
    extra_params TEXT,
    execution_engine TEXT,
    registered REAL NOT NULL,
    updated REAL NOT NULL
);
"""


@dataclass(frozen=True)
class Registration:
    """One registered table; `base_path` is normalised (an absolute local path or `s3://bucket/prefix`)."""

    base_path: str
    db_name: str | None = None
    table_name: str | None = None
    owner: str | None = None
    queue: str | None = None
    resources: str | None = None
    parallelism: int | None = None
    extra_params: str | None = None
    execution_engine: str | None = None
    registered: float = 0.0
    updated: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_COLUMNS = [f.name for f in fields(Registration)]
_UPSERT = (
    f"INSERT INTO tsm_registrations ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)}) "
    "ON CONFLICT(base_path) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS if c not in ("base_path", "registered"))
)
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM tsm_registrations"


def _registration(row: Sequence[Any]) -> Registration:
    return Registration(**dict(zip(_COLUMNS, row, strict=True)))


class Registrations:
    """The registrations in the SQLite file at `path`, opened on first use; safe from any thread. Errors are
    StateStoreError naming the file."""

    def __init__(self, path: str, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._guard = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            db = sqlite3.connect(self.path, check_same_thread=False, timeout=10.0, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(_SCHEMA)
            except BaseException:
                db.close()
                raise
            self._db = db
        return self._db

    def _run(self, what: str, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        with self._guard:
            try:
                return fn(self._connection())
            except (sqlite3.Error, OSError) as e:
                if self._db is not None:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.close()
                    self._db = None
                raise StateStoreError(f"cannot {what} the table registrations in {self.path}: {e}") from e

    def register(self, registration: Registration) -> tuple[Registration, bool]:
        """Store `registration` (a table registered again keeps its first `registered` time and takes the new
        hints); returns the stored row and whether the table is new."""
        now = self._clock()

        def upsert(db: sqlite3.Connection) -> tuple[Registration, bool]:
            row = db.execute("SELECT registered FROM tsm_registrations WHERE base_path = ?", (registration.base_path,))
            found = row.fetchone()
            stored = Registration(**{**asdict(registration), "registered": found[0] if found else now, "updated": now})
            db.execute(_UPSERT, [getattr(stored, c) for c in _COLUMNS])
            return stored, found is None

        result: tuple[Registration, bool] = self._run("write", upsert)
        return result

    def deregister(self, base_path: str) -> Registration | None:
        """Remove the table's registration; returns the removed row (None when the table was not registered)."""

        def delete(db: sqlite3.Connection) -> Registration | None:
            found = db.execute(f"{_SELECT} WHERE base_path = ?", (base_path,)).fetchone()
            if found is None:
                return None
            db.execute("DELETE FROM tsm_registrations WHERE base_path = ?", (base_path,))
            return _registration(found)

        result: Registration | None = self._run("write", delete)
        return result

    def all(self) -> list[Registration]:
        """Every registration, oldest first."""

        def select(db: sqlite3.Connection) -> list[Registration]:
            rows = db.execute(f"{_SELECT} ORDER BY registered, base_path")
            return [_registration(row) for row in rows.fetchall()]

        result: list[Registration] = self._run("read", select)
        return result

    def close(self) -> None:
        with self._guard:
            if self._db is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._db.close()
                self._db = None
