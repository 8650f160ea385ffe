"""Instants: one action at one point of the timeline, in one state.

Layout 1 (table version 6) keeps `<requested>.<action>[.<state>]` files in `.hoodie/`; layout 2 (versions
8 and 9) keeps `<requested>.<action>.<state>` and `<requested>_<completed>.<action>` in `.hoodie/timeline/`.
Some actions change their name when they complete (compaction -> commit, log compaction -> deltacommit,
clustering -> replacecommit in layout 2), and a commit's inflight file is named `<t>.inflight`.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo

from tableservice.errors import InvalidTimelineError
from tableservice.hudi.timeline.zone import ProcessLocalZone

INSTANT_FORMAT = "%Y%m%d%H%M%S"
INIT_INSTANT_TS = "00000000000000"
METADATA_BOOTSTRAP_INSTANT_TS = "00000000000001"
FULL_BOOTSTRAP_INSTANT_TS = "00000000000002"


class State(enum.IntEnum):
    """Ordered so that a later state compares greater."""

    REQUESTED = 0
    INFLIGHT = 1
    COMPLETED = 2


class Action(enum.StrEnum):
    COMMIT = "commit"
    DELTA_COMMIT = "deltacommit"
    REPLACE_COMMIT = "replacecommit"
    CLUSTERING = "clustering"
    COMPACTION = "compaction"
    LOG_COMPACTION = "logcompaction"
    CLEAN = "clean"
    ROLLBACK = "rollback"
    SAVEPOINT = "savepoint"
    RESTORE = "restore"
    INDEXING = "indexing"
    SCHEMA_COMMIT = "schemacommit"


# Actions whose completed file carries another action's name.
_COMPLETED_AS_V1 = {Action.COMPACTION: Action.COMMIT, Action.LOG_COMPACTION: Action.DELTA_COMMIT}
_COMPLETED_AS_V2 = {**_COMPLETED_AS_V1, Action.CLUSTERING: Action.REPLACE_COMMIT}
# Actions that write data files (what readers count as commits).
WRITE_ACTIONS = frozenset(
    {
        Action.COMMIT,
        Action.DELTA_COMMIT,
        Action.REPLACE_COMMIT,
        Action.CLUSTERING,
        Action.COMPACTION,
        Action.LOG_COMPACTION,
    }
)
# For ordering: an action sorts like the action it completes as (Hudi's comparable actions).
_COMPARABLE = {Action.COMPACTION: "commit", Action.LOG_COMPACTION: "deltacommit", Action.CLUSTERING: "replacecommit"}

_TS = r"(\d{14,20})"
_NAME_RE = re.compile(rf"^{_TS}(?:_{_TS})?(?:\.([a-z]+))?(?:\.(requested|inflight))?$")


@dataclass(frozen=True, order=False)
class Instant:
    """An instant on the timeline. `completion_time` is set for completed instants of layout 2 (and, for
    layout 1, from the completed file's modification time when a caller needs it)."""

    requested_time: str
    action: Action
    state: State
    completion_time: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"\d{14,20}", self.requested_time):
            raise InvalidTimelineError(f"invalid instant time {self.requested_time!r}")

    # --- identity and ordering ---------------------------------------------------------------------

    @property
    def sort_key(self) -> tuple[str, str, int]:
        return (self.requested_time, _COMPARABLE.get(self.action, self.action.value), int(self.state))

    def __lt__(self, other: Instant) -> bool:
        return self.sort_key < other.sort_key

    @property
    def is_completed(self) -> bool:
        return self.state is State.COMPLETED

    @property
    def is_requested(self) -> bool:
        return self.state is State.REQUESTED

    @property
    def is_inflight(self) -> bool:
        return self.state is State.INFLIGHT

    def with_state(self, state: State, completion_time: str | None = None) -> Instant:
        return Instant(self.requested_time, self.action, state, completion_time)

    def completed_action(self, layout_version: int) -> Action:
        """The action name of this instant's completed file."""
        table = _COMPLETED_AS_V2 if layout_version >= 2 else _COMPLETED_AS_V1
        return table.get(self.action, self.action)

    def __str__(self) -> str:
        done = f"_{self.completion_time}" if self.completion_time else ""
        return f"[{self.requested_time}{done}__{self.action.value}__{self.state.name}]"

    # --- file names --------------------------------------------------------------------------------

    def file_name(self, layout_version: int) -> str:
        """The timeline file name of this instant in the given layout."""
        t = self.requested_time
        if self.state is State.COMPLETED:
            action = self.completed_action(layout_version).value
            if layout_version >= 2:
                if self.completion_time is None:
                    raise InvalidTimelineError(f"completed instant {self} has no completion time")
                return f"{t}_{self.completion_time}.{action}"
            return f"{t}.{action}"
        if self.state is State.INFLIGHT:
            if self.action is Action.COMMIT:
                return f"{t}.inflight"
            return f"{t}.{self.action.value}.inflight"
        return f"{t}.{self.action.value}.requested"


def parse_instant_file_name(name: str) -> Instant | None:
    """The instant a timeline file name describes, or None for names that are not instants.

    In a completed file, `commit` may stand for a compaction and `replacecommit` for a clustering; callers
    that need to know (the timeline loader) reconcile that with the instant's requested file.
    """
    m = _NAME_RE.match(name)
    if m is None:
        return None
    requested, completed, action_name, state_name = m.groups()
    if state_name is None and action_name in ("requested", "inflight"):
        action_name, state_name = None, action_name
    if action_name is None:
        if state_name == "inflight":
            return Instant(requested, Action.COMMIT, State.INFLIGHT)
        return None
    try:
        action = Action(action_name)
    except ValueError:
        return None
    if state_name is None:
        return Instant(requested, action, State.COMPLETED, completed)
    if completed is not None:
        return None
    return Instant(requested, action, State.REQUESTED if state_name == "requested" else State.INFLIGHT)


PROCESS_LOCAL_ZONE = ProcessLocalZone()
SECOND_TIME_MILLIS = 999

# --- instant times ---------------------------------------------------------------------------------


def parse_instant_time(ts: str, tz: tzinfo) -> datetime:
    """The moment an instant time names (14- or 17-digit forms; longer metadata-table forms truncated). A 14-digit
    (second) time reads as the second's last millisecond, as Hudi reads it (`HoodieInstantTimeGenerator`'s
    `DEFAULT_MILLIS_EXT` "999"): the record index stores that moment for a legacy base instant."""
    if not re.fullmatch(r"\d{14,20}", ts):
        raise InvalidTimelineError(f"invalid instant time {ts!r}")
    try:  # fixed-width digits (checked above): read as integers, as strptime would, without its cost (every poll)
        base = datetime(
            int(ts[0:4]), int(ts[4:6]), int(ts[6:8]), int(ts[8:10]), int(ts[10:12]), int(ts[12:14]), tzinfo=tz
        )
    except ValueError as e:
        raise InvalidTimelineError(f"instant time {ts!r} is not a valid date: {e}") from e
    millis = int(ts[14:17]) if len(ts) >= 17 else SECOND_TIME_MILLIS if len(ts) == 14 else 0
    return base + timedelta(milliseconds=millis)


def instant_epoch_ms(ts: str, tz: tzinfo) -> int:
    """The epoch milliseconds an instant time names, read in the timeline's zone (the record index stores it)."""
    return int(parse_instant_time(ts, tz).timestamp() * 1000)


def format_instant_time(moment: datetime, tz: tzinfo) -> str:
    local = moment.astimezone(tz)
    return local.strftime(INSTANT_FORMAT) + f"{local.microsecond // 1000:03d}"


def timeline_timezone(name: str | None) -> tzinfo:
    """Hudi's `hoodie.table.timeline.timezone`: `UTC`, or `LOCAL` (the default) for the process's zone, with its
    rules (each instant time read with the offset of its own moment, as Java's system default zone reads it)."""
    if name is not None and name.upper() == "UTC":
        return UTC
    return PROCESS_LOCAL_ZONE


def next_instant_time(existing: list[str], tz: tzinfo, now: datetime | None = None) -> str:
    """An instant time strictly greater than every time in `existing` and not earlier than now."""
    current = format_instant_time(now if now is not None else datetime.now(UTC), tz)
    highest = max((t for t in existing if len(t) >= 14), default=None, key=_normalised)
    if highest is None or _normalised(current) > _normalised(highest):
        return current
    bumped = parse_instant_time(highest, tz) + timedelta(milliseconds=1)
    return format_instant_time(bumped, tz)


def _normalised(ts: str) -> str:
    """Compare 14-digit legacy times with 17-digit ones by padding milliseconds."""
    return ts + "000" if len(ts) == 14 else ts[:17]
