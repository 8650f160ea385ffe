"""The history of the actions the daemon ran: one row per action (table, action, instant, start, end, outcome, what
it read, wrote, deleted and archived, the error of a failed one), in an SQLite file beside the daemon's state.

Hudi's active timeline forgets an action once it is archived, and says nothing of the attempts that failed; the
history keeps both for `max_age_days` days and at most `max_rows` rows (pruned on every insert). It is served at
/history and by `tableservice history` (which reads the file itself with `--offline`).

Worker threads record and the HTTP route queries: one connection guarded by a lock, the file in WAL mode so that
an offline reader never waits for the daemon. Recording never raises: a history that cannot be written (a corrupt
file, a full or read-only disk) is logged as a warning and counted (`tableservice_history_write_failures_total`),
and the action it describes goes on as if nothing happened; the next record opens the file again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from tableservice.config import HistorySettings
from tableservice.errors import HistoryError
from tableservice.metrics import Metrics
from tableservice.service.protocol import Outcome

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "SUMMED_COLUMNS",
    "ActionHistory",
    "ActionOutcome",
    "ActionRecord",
    "action_record",
    "answer_query",
    "default_history_path",
    "history_path",
    "iso_time",
    "parse_query",
    "parse_since",
]

log = logging.getLogger(__name__)
DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000
_DAY_S = 86_400.0
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": _DAY_S, "w": 7 * _DAY_S}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNIX = re.compile(r"\d+(?:\.\d+)?")


class ActionOutcome(StrEnum):
    """How one action ended."""

    COMPLETED = "completed"
    FAILED = "failed"  # retried on a later pass
    ABANDONED = "abandoned"  # a write that completed after its plan conflicts: the plan was removed
    HELD_BACK = "held back"  # a permanent failure: not retried until its hold runs out
    SKIPPED = "skipped"  # another process completed or removed the instant first


@dataclass(frozen=True)
class ActionRecord:
    """One action the daemon ran; times are unix seconds."""

    table: str
    action: str
    instant: str
    started: float
    ended: float
    outcome: ActionOutcome
    records_read: int = 0
    records_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    files_deleted: int = 0
    bytes_deleted: int = 0
    instants_archived: int = 0
    failed_writes_rolled_back: int = 0
    error: str | None = None
    # what the action cost (the ledger: `service/ledger.py`)
    spark_seconds: float = 0.0  # the action's Spark jobs, submission to last task (start-up excluded)
    executor_seconds: float = 0.0  # the tasks' own run time, summed over executors
    requests_get: int = 0  # object-store requests of the action's tasks, by kind
    requests_put: int = 0
    requests_list: int = 0
    requests_head: int = 0
    requests_post: int = 0
    requests_delete: int = 0
    # and what it bought: the read path of the file groups it rewrote, before and after
    log_files_removed: int = 0
    log_bytes_removed: int = 0
    file_groups_before: int = 0
    file_groups_after: int = 0
    files_before: int = 0  # base and log files a reader opens for those file groups
    files_after: int = 0
    id: int | None = None  # given by the store

    def to_json(self) -> dict[str, Any]:
        """The record with ISO-8601 (UTC) times beside the unix ones, and its duration."""
        doc = asdict(self)
        doc["outcome"] = str(self.outcome)
        doc["start"] = iso_time(self.started)
        doc["end"] = iso_time(self.ended)
        doc["duration_seconds"] = round(self.ended - self.started, 3)
        return doc


_COLUMNS = [f.name for f in fields(ActionRecord) if f.name != "id"]
_SCHEMA = """
CREATE TABLE IF NOT EXISTS actions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    "table" TEXT NOT NULL,
    action TEXT NOT NULL,
    instant TEXT NOT NULL,
    started REAL NOT NULL,
    ended REAL NOT NULL,
    outcome TEXT NOT NULL,
    records_read INTEGER NOT NULL,
    records_written INTEGER NOT NULL,
    bytes_read INTEGER NOT NULL,
    bytes_written INTEGER NOT NULL,
    files_deleted INTEGER NOT NULL,
    bytes_deleted INTEGER NOT NULL,
    instants_archived INTEGER NOT NULL,
    failed_writes_rolled_back INTEGER NOT NULL,
    error TEXT
);
CREATE INDEX IF NOT EXISTS actions_by_end ON actions (ended);
CREATE INDEX IF NOT EXISTS actions_by_table ON actions ("table", id);
"""
# Columns added after the first release: a file written before them gets them (0) when the daemon opens it.
_FIRST = set(re.findall(r'^\s+"?(\w+)"? (?:TEXT|REAL|INTEGER)', _SCHEMA, re.MULTILINE))
_ADDED = {
    f.name: ("REAL" if f.type == "float" else "INTEGER") for f in fields(ActionRecord) if f.name not in _FIRST | {"id"}
}
_QUOTED = ", ".join(f'"{c}"' for c in _COLUMNS)
_INSERT = f"INSERT INTO actions ({_QUOTED}) VALUES ({', '.join('?' for _ in _COLUMNS)})"


def _select(present: set[str]) -> str:
    """SELECT of every column; one a file does not have yet (opened read-only, written by an older daemon) reads 0."""
    return "SELECT id, " + ", ".join(f'"{c}"' if c in present else f'0 AS "{c}"' for c in _COLUMNS) + " FROM actions"


def iso_time(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def default_history_path(env: dict[str, str] | None = None) -> str:
    """`$XDG_STATE_HOME/tableservice/history.sqlite`, else under `~/.local/state`."""
    env = dict(os.environ) if env is None else env
    state = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "tableservice", "history.sqlite")


def history_path(settings: HistorySettings) -> str:
    return settings.path or default_history_path()


def parse_since(text: str, now: float | None = None) -> float:
    """Unix seconds from `text`: an ISO-8601 date or date-time (UTC when it names no zone), unix seconds, or a
    duration before `now` (`90s`, `30m`, `12h`, `7d`, `2w`). ValueError says what is accepted."""
    value = text.strip()
    now = time.time() if now is None else now
    if match := _DURATION.fullmatch(value):
        return now - float(match.group(1)) * _UNITS[match.group(2)]
    if _UNIX.fullmatch(value):
        return float(value)
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
    except ValueError:
        raise ValueError(
            f"since={text!r}: expected an ISO-8601 date-time, unix seconds or a duration such as 7d, 12h, 30m"
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


class ActionHistory:
    """The history file: `record` from any thread (never raises), `query` newest first."""

    def __init__(
        self,
        path: str,
        *,
        max_rows: int = 100_000,
        max_age_days: float = 90.0,
        metrics: Metrics | None = None,
        read_only: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self._clock = clock
        self.max_rows = max_rows
        self.max_age_s = max_age_days * _DAY_S
        self.read_only = read_only
        self._metrics = metrics
        self._guard = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._select_sql = _select(set(_COLUMNS))

    @classmethod
    def from_settings(cls, settings: HistorySettings, metrics: Metrics | None = None) -> ActionHistory | None:
        """The daemon's history (None when `enabled` is false). The file is opened on first use."""
        if not settings.enabled:
            return None
        return cls(
            history_path(settings), max_rows=settings.max_rows, max_age_days=settings.max_age_days, metrics=metrics
        )

    def _connection(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        if self.read_only:
            if not os.path.isfile(self.path):
                raise HistoryError(f"no action history at {self.path}")
            db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False, timeout=10.0)
        else:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            db = sqlite3.connect(self.path, check_same_thread=False, timeout=10.0, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.executescript(_SCHEMA)
                _add_columns(db)
            except BaseException:
                db.close()
                raise
        try:
            self._select_sql = _select(_present(db))
        except sqlite3.Error:
            db.close()
            raise
        self._db = db
        return db

    def _drop(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None

    def record(self, record: ActionRecord) -> bool:
        """Append `record` and prune what is beyond the bounds; False (a warning, a counted failure) when the file
        cannot be written. Never raises."""
        try:
            with self._guard:
                try:
                    db = self._connection()
                    with _transaction(db):
                        db.execute(_INSERT, [_column(getattr(record, c)) for c in _COLUMNS])
                        self._prune(db, self._clock())
                    return True
                except BaseException:
                    self._drop()
                    raise
        except (sqlite3.Error, OSError, HistoryError) as e:
            log.warning(
                "could not record %s %s in the action history %s: %s",
                record.action,
                record.instant,
                self.path,
                e,
                extra={"table": record.table, "instant": record.instant},
            )
            if self._metrics is not None:
                self._metrics.history_write_failed()
            return False

    def _prune(self, db: sqlite3.Connection, now: float) -> None:
        db.execute("DELETE FROM actions WHERE ended < ?", (now - self.max_age_s,))
        db.execute(
            "DELETE FROM actions WHERE id < (SELECT id FROM actions ORDER BY id DESC LIMIT 1 OFFSET ?)",
            (self.max_rows - 1,),
        )

    def query(
        self, *, table: str | None = None, since: float | None = None, limit: int = DEFAULT_LIMIT
    ) -> list[ActionRecord]:
        """Actions of `table` (all tables when None) that ended at or after `since`, newest first, at most `limit`.
        HistoryError when the file cannot be read."""
        where, args = _where(table, since)
        args.append(max(0, min(limit, MAX_LIMIT)))
        rows = self._read(lambda: f"{self._select_sql}{where} ORDER BY id DESC LIMIT ?", args)
        return [_from_row(row) for row in rows]

    def totals(self, *, table: str | None = None, since: float | None = None) -> list[dict[str, Any]]:
        """Per table and action, over the actions that ended at or after `since`: how many (`actions`, `completed`,
        `failed`: failed or held back) and the sum of every count and cost column. HistoryError when unreadable."""
        where, args = _where(table, since)
        sums = [c for c in _COLUMNS if c in SUMMED_COLUMNS]

        def sql() -> str:
            inner = f"({self._select_sql}{where}) AS a"
            summed = ", ".join(f'TOTAL("{c}")' for c in sums)
            return (
                f"SELECT \"table\", action, COUNT(*), SUM(outcome = 'completed'), "
                f"SUM(outcome IN ('failed', 'held back')), {summed} FROM {inner} GROUP BY \"table\", action "
                'ORDER BY "table", action'
            )

        out = []
        for row in self._read(sql, args):
            doc: dict[str, Any] = {"table": row[0], "action": row[1], "actions": row[2]}
            doc["completed"], doc["failed"] = int(row[3] or 0), int(row[4] or 0)
            for name, value in zip(sums, row[5:], strict=True):
                doc[name] = round(float(value), 3) if name.endswith("seconds") else int(value)
            out.append(doc)
        return out

    def _read(self, sql: Callable[[], str], args: list[object]) -> list[tuple[Any, ...]]:
        with self._guard:
            try:
                db = self._connection()  # first: the SELECT depends on the columns the file has
                return db.execute(sql(), args).fetchall()
            except sqlite3.Error as e:
                self._drop()
                raise HistoryError(f"cannot read the action history {self.path}: {e}") from e

    def close(self) -> None:
        with self._guard:
            self._drop()


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error) on a connection in autocommit mode."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


SUMMED_COLUMNS = {
    f.name for f in fields(ActionRecord) if f.type in ("int", "float") and f.name not in {"id", "started", "ended"}
}


def _where(table: str | None, since: float | None) -> tuple[str, list[object]]:
    where: list[str] = []
    args: list[object] = []
    if table is not None:
        where.append('"table" = ?')
        args.append(table)
    if since is not None:
        where.append("ended >= ?")
        args.append(since)
    return (f" WHERE {' AND '.join(where)}" if where else ""), args


def _present(db: sqlite3.Connection) -> set[str]:
    return {str(row[1]) for row in db.execute("PRAGMA table_info(actions)")}


def _add_columns(db: sqlite3.Connection) -> None:
    present = _present(db)
    for name, kind in _ADDED.items():
        if name not in present:
            db.execute(f'ALTER TABLE actions ADD COLUMN "{name}" {kind} NOT NULL DEFAULT 0')


def _column(value: object) -> object:
    return str(value) if isinstance(value, ActionOutcome) else value


def _from_row(row: tuple[Any, ...]) -> ActionRecord:
    values = dict(zip(_COLUMNS, row[1:], strict=True))
    values["outcome"] = ActionOutcome(values["outcome"])
    return ActionRecord(id=row[0], **values)


def action_record(
    table: str,
    action: str,
    instant: str,
    started: float,
    outcome: ActionOutcome,
    done: object = None,
    error: str | None = None,
    spark_seconds: float = 0.0,
) -> ActionRecord:
    """The record of one action that ends now; `done` is what it returned (its `Outcome` when it executed an
    instant, whose counts the record takes)."""
    counts: dict[str, Any] = {}
    if isinstance(done, Outcome):
        counts = {
            "records_read": done.records_read,
            "records_written": done.records_written,
            "bytes_read": done.bytes_read,
            "bytes_written": done.bytes_written,
            "files_deleted": done.files_deleted,
            "bytes_deleted": done.bytes_deleted,
            "instants_archived": done.instants_archived,
            "failed_writes_rolled_back": done.failed_writes_rolled_back,
            "executor_seconds": done.executor_seconds,
        }
        if done.benefit is not None:
            counts.update(asdict(done.benefit))
        counts.update({f"requests_{kind.lower()}": n for kind, n in done.requests.items()})
    ended = max(started, time.time())
    return ActionRecord(
        table, action, instant, started, ended, outcome, error=error, spark_seconds=spark_seconds, **counts
    )


def parse_query(query: str, allowed: tuple[str, ...], now: float | None = None) -> dict[str, Any] | str:
    """`table`, `since` (unix seconds) and `limit` from a query string of the history routes, or the problem."""
    try:
        params = urllib.parse.parse_qs(query, keep_blank_values=True, strict_parsing=False, max_num_fields=16)
    except ValueError as e:
        return f"malformed query string: {e}"
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        return f"unknown query parameters {', '.join(unknown)}: expected {', '.join(allowed)}"
    repeated = sorted(k for k, v in params.items() if len(v) > 1)
    if repeated:
        return f"query parameters given more than once: {', '.join(repeated)}"
    out: dict[str, Any] = {"table": params["table"][0] if "table" in params else None}
    try:
        out["since"] = parse_since(params["since"][0], now) if "since" in params else None
        out["limit"] = int(params["limit"][0]) if "limit" in params else DEFAULT_LIMIT
    except ValueError as e:
        return str(e)
    if not 1 <= out["limit"] <= MAX_LIMIT:
        return f"limit={out['limit']}: expected 1 to {MAX_LIMIT}"
    return out


def answer_query(history: ActionHistory, query: str, now: float | None = None) -> tuple[int, dict[str, Any]]:
    """The /history answer to the query string `query` (`table`, `since`, `limit`): (HTTP status, JSON document).
    Blocking (reads the file)."""
    parsed = parse_query(query, ("table", "since", "limit"), now)
    if isinstance(parsed, str):
        return 400, {"error": parsed}
    table, since, limit = parsed["table"], parsed["since"], parsed["limit"]
    try:
        records = history.query(table=table, since=since, limit=limit)
    except HistoryError as e:
        return 503, {"error": str(e)}
    return 200, {
        "table": table,
        "since": None if since is None else iso_time(since),
        "limit": limit,
        "actions": [r.to_json() for r in records],
    }
