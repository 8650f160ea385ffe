"""The active timeline: instants listed from `.hoodie` (layout 1) or `.hoodie/timeline` (layout 2).

`Timeline` is an immutable, sorted collection of instants (one entry per instant, in its latest state) with
the views planners and readers need. `ActiveTimeline` lists, reads and writes timeline files through storage;
each state transition creates its file atomically and never overwrites another writer's file.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from tableservice.errors import AlreadyExistsError, ConflictError, FileMissingError, InvalidTimelineError
from tableservice.hudi.table.config import TableConfig
from tableservice.hudi.timeline.instant import (
    WRITE_ACTIONS,
    Action,
    Instant,
    State,
    next_instant_time,
    parse_instant_file_name,
    timeline_timezone,
)
from tableservice.storage import STALE_TEMP_AGE_MS, FileInfo, Storage, is_temp_file, join

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timeline:
    """Instants sorted by requested time; each appears once, in its latest state."""

    instants: tuple[Instant, ...]
    layout_version: int
    # Modification times of completed files (milliseconds), for layout-1 completion times.
    completed_mtimes: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    # The views every poll asks for several times (completed, pending, pending of an action), made once: the
    # timeline is immutable.
    _views: dict[object, Timeline] = field(default_factory=dict, init=False, compare=False, repr=False)

    def __iter__(self) -> Iterator[Instant]:
        return iter(self.instants)

    def __len__(self) -> int:
        return len(self.instants)

    def mark(self) -> int:
        """Changes with any instant or state on the timeline (equal marks: the same timeline)."""
        return hash(tuple((i.requested_time, i.action, i.state) for i in self.instants))

    def __bool__(self) -> bool:
        return bool(self.instants)

    def _with(self, instants: Iterable[Instant]) -> Timeline:
        return Timeline(tuple(instants), self.layout_version, self.completed_mtimes)

    # --- filters -----------------------------------------------------------------------------------

    def filter(self, predicate: Callable[[Instant], bool]) -> Timeline:
        return self._with(i for i in self.instants if predicate(i))

    def of_actions(self, *actions: Action) -> Timeline:
        wanted = set(actions)
        return self.filter(lambda i: i.action in wanted)

    def _view(self, key: object, predicate: Callable[[Instant], bool]) -> Timeline:
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = self.filter(predicate)
        return view

    def completed(self) -> Timeline:
        return self._view("completed", lambda i: i.is_completed)

    def pending(self) -> Timeline:
        return self._view("pending", lambda i: not i.is_completed)

    def write_instants(self) -> Timeline:
        """Instants that write data files: commit, deltacommit, replacecommit, compaction, clustering..."""
        return self.filter(lambda i: i.action in WRITE_ACTIONS)

    def completed_writes(self) -> Timeline:
        return self.write_instants().completed()

    def pending_compactions(self) -> Timeline:
        return self.pending_of(Action.COMPACTION)

    def pending_log_compactions(self) -> Timeline:
        return self.pending_of(Action.LOG_COMPACTION)

    def pending_of(self, action: Action) -> Timeline:
        return self._view(action, lambda i: i.action is action and not i.is_completed)

    def savepoints(self) -> Timeline:
        return self.filter(lambda i: i.action is Action.SAVEPOINT and i.is_completed)

    def before(self, instant_time: str) -> Timeline:
        return self.filter(lambda i: i.requested_time < instant_time)

    def at_or_before(self, instant_time: str) -> Timeline:
        return self.filter(lambda i: i.requested_time <= instant_time)

    def after(self, instant_time: str) -> Timeline:
        return self.filter(lambda i: i.requested_time > instant_time)

    # --- lookups -----------------------------------------------------------------------------------

    def first(self) -> Instant | None:
        return self.instants[0] if self.instants else None

    def last(self) -> Instant | None:
        return self.instants[-1] if self.instants else None

    def get(self, requested_time: str, action: Action | None = None) -> Instant | None:
        for i in self.instants:
            if i.requested_time == requested_time and (action is None or i.action is action):
                return i
        return None

    def by_time(self) -> dict[str, Instant]:
        return {i.requested_time: i for i in self.instants}

    def is_completed(self, requested_time: str) -> bool:
        i = self.get(requested_time)
        return i is not None and i.is_completed

    def is_before_start(self, requested_time: str) -> bool:
        """True when `requested_time` is older than the start of the active commits timeline (archived)."""
        start = self.commits_start()
        return start is not None and requested_time < start and self.get(requested_time) is None

    def commits_start(self) -> str | None:
        """Where the active commits timeline starts, as Hudi decides what is archived: the first completed write
        that is not savepointed (savepointed commits stay active while older ones are archived), else the first
        completed write, else the first instant. Data files older than this are committed and archived."""
        writes = self.completed_writes().instants
        saved = {i.requested_time for i in self.savepoints()}
        for i in writes:
            if i.requested_time not in saved:
                return i.requested_time
        if writes:
            return writes[0].requested_time
        first = self.first()
        return first.requested_time if first else None

    def completion_time(self, requested_time: str) -> str | None:
        i = self.get(requested_time)
        return i.completion_time if i is not None and i.is_completed else None

    def all_times(self) -> list[str]:
        """Every requested and completion time on the timeline."""
        out = [i.requested_time for i in self.instants]
        out.extend(i.completion_time for i in self.instants if i.completion_time)
        return out


def build_timeline(files: Iterable[FileInfo], layout_version: int, *, table: str | None = None) -> Timeline:
    """Reconcile the timeline files of each instant into one entry in its latest state.

    A completed `commit` whose requested file is `compaction.requested` is a completed compaction (and
    `replacecommit` after `clustering.requested` a completed clustering): the instant keeps the action it
    was requested as, so that its file names can be derived again. A savepoint carries the time of the commit it
    keeps, so savepoint files are reconciled apart from the other files of that time.

    Two actions requested at one time (two `.requested` files) are refused with InvalidTimelineError naming both:
    instant times must be unique, and merging them would hide one (a Hudi writer that takes no lock to make its
    instant time and this daemon chose the same millisecond).
    """
    latest: dict[tuple[str, bool], Instant] = {}
    requested_action: dict[tuple[str, bool], Action] = {}
    requested_file: dict[tuple[str, bool], FileInfo] = {}
    mtimes: dict[str, int] = {}
    for fi in files:
        if fi.is_dir:
            continue
        parsed = parse_instant_file_name(fi.name)
        if parsed is None:
            continue
        key = (parsed.requested_time, parsed.action is Action.SAVEPOINT)
        if parsed.state is State.REQUESTED:
            other = requested_file.setdefault(key, fi)
            if other is not fi:
                raise InvalidTimelineError(
                    f"two actions are requested at instant time {parsed.requested_time} ({other.name} and {fi.name}):"
                    " instant times must be unique, and one would be hidden; a writer and this daemon (or two"
                    " writers) chose the same millisecond. Remove the one that has not started, with no writer"
                    " running, or roll it back with Hudi's CLI",
                    table=table,
                    path=fi.location,
                )
        if parsed.state is not State.COMPLETED:
            known = requested_action.get(key)
            if known is None or _more_specific(parsed.action, known):
                requested_action[key] = parsed.action
        elif not key[1]:
            mtimes[parsed.requested_time] = fi.mtime_ms
        cur = latest.get(key)
        if cur is None or parsed.state > cur.state:
            latest[key] = parsed
    out = []
    for key, inst in latest.items():
        t = key[0]
        original = requested_action.get(key)
        if original is not None and inst.is_completed and inst.completed_action(layout_version) is not original:
            if (
                Instant(t, original, State.COMPLETED, inst.completion_time).completed_action(layout_version)
                is inst.action
            ):
                inst = Instant(t, original, State.COMPLETED, inst.completion_time)
        elif (
            original is not None
            and not inst.is_completed
            and inst.action is Action.COMMIT
            and original is not Action.COMMIT
        ):
            # `<t>.inflight` is the commit inflight name; a requested file of another action wins.
            inst = Instant(t, original, inst.state)
        out.append(inst)
    out.sort()
    return Timeline(tuple(out), layout_version, mtimes)


def _more_specific(candidate: Action, known: Action) -> bool:
    """`<t>.inflight` parses as a commit; any explicitly named action is more specific."""
    return known is Action.COMMIT and candidate is not Action.COMMIT


class ActiveTimeline:
    """Lists, reads and changes the timeline files of one table."""

    def __init__(self, storage: Storage, base_path: str, config: TableConfig) -> None:
        self.storage = storage
        self.base_path = base_path
        self.config = config
        self.folder = join(base_path, config.timeline_folder)
        self.layout_version = config.layout_version
        self.tz = timeline_timezone(config.timezone_name)
        self._floor: str | None = None
        self._last: tuple[tuple[tuple[str, int], ...], Timeline] | None = None  # the last listing and its timeline

    # --- reading -----------------------------------------------------------------------------------

    def load(self, *, sweep_temp_files: bool = False) -> Timeline:
        """One listing of the timeline folder (temp files `.tmp-*` are never instants). With `sweep_temp_files`
        (a caller holding the table lock), temp files older than an hour, left by killed processes, are deleted."""
        if not sweep_temp_files:
            return self._built(self.storage.list(self.folder))
        files = self.storage.list(self.folder, temp_files=True)
        stale = time.time() * 1000 - STALE_TEMP_AGE_MS
        for fi in files:
            if not fi.is_dir and is_temp_file(fi.name) and fi.mtime_ms < stale:
                log.info("removing stale temp file %s", fi.location, extra={"table": self.config.name})
                self.storage.delete(fi.location)
        return build_timeline(
            (fi for fi in files if not is_temp_file(fi.name)), self.layout_version, table=self.config.name
        )

    def _built(self, files: list[FileInfo]) -> Timeline:
        """The timeline of a listing; the one built last when the listing names the same files with the same
        modification times (an idle table's poll: nothing parsed again)."""
        key = tuple((fi.name, fi.mtime_ms) for fi in files if not fi.is_dir)
        last = self._last
        if last is not None and last[0] == key:
            return last[1]
        timeline = build_timeline(files, self.layout_version, table=self.config.name)
        self._last = (key, timeline)
        return timeline

    def path_of(self, instant: Instant) -> str:
        return join(self.folder, instant.file_name(self.layout_version))

    def read(self, instant: Instant) -> bytes:
        """The content of the instant's file in its state (empty bytes are common for inflight files)."""
        return self.storage.read_bytes(self.path_of(instant))

    def read_state(self, instant: Instant, state: State) -> bytes:
        """The content of the instant's file of an earlier state (e.g. the plan in `.requested`)."""
        if state is State.COMPLETED:
            return self.read(instant)
        return self.storage.read_bytes(self.path_of(instant.with_state(state)))

    def read_plan(self, instant: Instant) -> bytes:
        """The requested file: where compaction, clustering, clean, rollback and index plans live."""
        return self.read_state(instant, State.REQUESTED)

    # --- instant times -----------------------------------------------------------------------------

    def new_instant_time(self, timeline: Timeline, now: datetime | None = None) -> str:
        """A time strictly above every instant and completion time, and above any time `note_time` was given (the
        metadata table's completion of the same action). Call under the table lock."""
        times = timeline.all_times()
        if self._floor is not None:
            times = [*times, self._floor]
        return next_instant_time(times, self.tz, now)

    def note_time(self, time: str) -> None:
        """Make every later instant or completion time of this timeline greater than `time`."""
        if self._floor is None or time > self._floor:
            self._floor = time

    # --- transitions -------------------------------------------------------------------------------

    def _create(self, instant: Instant, content: bytes) -> Instant:
        path = self.path_of(instant)
        try:
            self.storage.create_if_absent(path, content)
        except AlreadyExistsError as e:
            if instant.state is State.REQUESTED:  # another process made an instant of this action at this time
                raise ConflictError(
                    f"{instant} was requested by another process meanwhile (the same millisecond); a new instant time"
                    " is chosen on the next attempt",
                    table=self.config.name,
                    path=path,
                ) from e
            raise InvalidTimelineError(
                f"timeline file for {instant} already exists", table=self.config.name, path=path
            ) from e
        return instant

    def create_requested(self, requested_time: str, action: Action, content: bytes = b"") -> Instant:
        """The instant's requested file; ConflictError (retryable) when another process made it first."""
        return self._create(Instant(requested_time, action, State.REQUESTED), content)

    def create_inflight(self, requested_time: str, action: Action, content: bytes = b"") -> Instant:
        """Savepoints start inflight (they have no requested state)."""
        return self._create(Instant(requested_time, action, State.INFLIGHT), content)

    def transition_to_inflight(self, instant: Instant, content: bytes = b"") -> Instant:
        if instant.state is not State.REQUESTED:
            raise InvalidTimelineError(f"cannot move {instant} to inflight", table=self.config.name)
        self._require(instant)
        return self._create(instant.with_state(State.INFLIGHT), content)

    def transition_to_completed(
        self, instant: Instant, content: bytes, *, timeline: Timeline | None = None, completion_time: str | None = None
    ) -> Instant:
        """Write the completed file. Layout 2 names it with a completion time generated above `timeline`."""
        if instant.state is not State.INFLIGHT:
            raise InvalidTimelineError(f"cannot complete {instant}: it is not inflight", table=self.config.name)
        self._require(instant)
        done: str | None = None
        if self.layout_version >= 2:
            done = completion_time or self.new_instant_time(timeline if timeline is not None else self.load())
        return self._create(instant.with_state(State.COMPLETED, done), content)

    def revert_to_requested(self, instant: Instant) -> Instant:
        """Drop the inflight file of a pending table service so that its plan runs again."""
        if instant.state is not State.INFLIGHT:
            raise InvalidTimelineError(f"cannot revert {instant}: it is not inflight", table=self.config.name)
        self.storage.delete(self.path_of(instant))
        return instant.with_state(State.REQUESTED)

    def delete_pending(self, instant: Instant) -> None:
        """Remove the inflight, then the requested file of a pending instant (a rolled-back write)."""
        if instant.is_completed:
            raise InvalidTimelineError(f"cannot delete completed {instant}", table=self.config.name)
        self.storage.delete(self.path_of(instant.with_state(State.INFLIGHT)))
        self.storage.delete(self.path_of(instant.with_state(State.REQUESTED)))

    def delete(self, instant: Instant) -> None:
        """Remove every file of `instant`, completed or pending."""
        if instant.is_completed:
            self.delete_completed(instant)
        else:
            self.delete_pending(instant)

    def delete_completed(self, instant: Instant) -> None:
        """Remove all files of a completed instant, newest first (used by restore and archival)."""
        for state in (State.COMPLETED, State.INFLIGHT, State.REQUESTED):
            if state is State.COMPLETED:
                self.storage.delete(self.path_of(instant))
            else:
                self.storage.delete(self.path_of(instant.with_state(state)))

    def _require(self, instant: Instant) -> None:
        path = self.path_of(instant)
        if not self.storage.exists(path):
            raise FileMissingError(f"timeline file for {instant} does not exist", table=self.config.name, path=path)
