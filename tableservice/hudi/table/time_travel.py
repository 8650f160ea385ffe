"""Time travel that is exact or refused: which instant a query time names, and whether the table still holds the
whole snapshot as of it.

Query time formats (Hudi's `HoodieSqlCommonUtils.formatQueryInstant` and `HoodieInstantTimeGenerator`):

- `yyyyMMddHHmmssSSS`: an instant time, as is.
- `yyyyMMddHHmmss`: the start of that second, `...000`. Hudi's Spark reader keeps the 14 digits and compares
  them as strings with 17-digit instant times, so it reads the writes before that second (and, unlike `...000`,
  not one requested at exactly `...000`); hudi-rs pads them with `000`. (Hudi pads `999` only where it parses an
  instant time into a date, `fixInstantTimeCompatibility`, which time travel does not use.)
- `yyyy-MM-dd HH:mm:ss.SSS`: that moment.
- `yyyy-MM-dd HH:mm:ss`: the end of that second (Hudi's `getInstantForDateString` appends `.999`).
- `yyyy-MM-dd`: the start of that day, `yyyyMMdd000000000`.

Date-time strings are wall-clock times on the table's timeline, like instant times themselves: Hudi parses them as
a `LocalDateTime` and formats the same fields, so nothing is converted between zones. Instant times are written in
the zone `hoodie.table.timeline.timezone` names (`UTC`, or `LOCAL`: the writer's zone), and a date-time string is
read in that same zone. Anything else (`yesterday`, an epoch, a date with a `T`) is refused.

What a time-travel read refuses (after Hudi's `TimelineUtils.validateTimestampAsOf`, made sound):

- an instant before the first completed write of the active timeline: "archived" when the table has archived
  instants (their data files may be cleaned, and the archived commits are not read), else "before the table's first
  commit"; a table with no completed write has no snapshot to travel to;
- an instant at or after the first pending write (commit, delta commit or replace commit that is not a clustering;
  pending compactions and clusterings do not change what a snapshot holds): the answer would change when that write
  completes (Hudi: "must be earlier than the first incomplete commit");
- an instant older than what the cleaner retains: before the latest completed clean's `earliestCommitToRetain`
  (Hudi's rule), or before the oldest surviving file slice of any file group a completed clean on the active timeline
  deleted files from (a group all of whose files were deleted: before the replace commit that replaced it, else
  before the clean). The second rule covers cleaning by file versions, which records no earliest commit to retain
  and where Hudi's fallback (the first active commit) lets a partial snapshot through.

An instant that names a rolled-back write exactly is answered like any other: a read as of T holds the writes
completed at or before T, and a rolled-back write left no data; the same holds for an instant between two writes.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from datetime import datetime

from tableservice.errors import InvalidTimelineError, InvalidTimeTravelError
from tableservice.hudi.file_group.filenames import parse_base_file_name, parse_log_file_name
from tableservice.hudi.models import decode_clean_metadata
from tableservice.hudi.table.fs_view import FileGroupId
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import incremental_instants
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant, parse_instant_time, timeline_timezone

ACCEPTED_FORMATS = (
    "yyyyMMddHHmmssSSS",
    "yyyyMMddHHmmss (the start of that second: ...000)",
    "yyyy-MM-dd HH:mm:ss.SSS",
    "yyyy-MM-dd HH:mm:ss (the end of that second: .999)",
    "yyyy-MM-dd (the start of that day: ...000000000)",
)
FORMATS_TEXT = "; ".join(ACCEPTED_FORMATS)
_DATE_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{3}))?")
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_END_OF_SECOND = "999"


def parse_query_time(text: str, *, option: str = "--as-of", table: str | None = None) -> str:
    """The 17-digit instant time a query time names (see the module's formats); InvalidTimeTravelError otherwise."""
    value = text.strip()

    def refuse(why: str) -> InvalidTimeTravelError:
        return InvalidTimeTravelError(
            f"{option} {text!r} {why}; accepted formats: {FORMATS_TEXT}", instant_time=text, table=table
        )

    if re.fullmatch(r"\d{17}|\d{14}", value):
        try:
            parse_instant_time(value, timeline_timezone("UTC"))
        except InvalidTimelineError as e:
            raise refuse("is not a valid date and time") from e
        return value if len(value) == 17 else value + "000"
    m = _DATE_TIME.fullmatch(value)
    if m is not None:
        year, month, day, hour, minute, second, millis = m.groups()
        if not _valid(year, month, day, hour, minute, second):
            raise refuse("is not a valid date and time")
        return f"{year}{month}{day}{hour}{minute}{second}{millis if millis is not None else _END_OF_SECOND}"
    m = _DATE.fullmatch(value)
    if m is not None:
        year, month, day = m.groups()
        if not _valid(year, month, day, "00", "00", "00"):
            raise refuse("is not a valid date")
        return f"{year}{month}{day}000000000"
    raise refuse("is not an instant time")


def _valid(year: str, month: str, day: str, hour: str, minute: str, second: str) -> bool:
    try:
        datetime(int(year), int(month), int(day), int(hour), int(minute), int(second))
    except ValueError:
        return False
    return True


def timeline_zone_label(table: HudiTable) -> str:
    """`UTC`, or `LOCAL (<zone>)`: the zone instant times and date-time query strings are read in."""
    name = table.config.timezone_name
    if name.upper() == "UTC":
        return "UTC"
    return f"LOCAL ({timeline_timezone(name)})"


@dataclass(frozen=True)
class Retention:
    """The oldest instant a time-travel read is exact at, and why."""

    instant_time: str
    reason: str


def check_as_of(table: HudiTable, timeline: Timeline, as_of: str, *, given: str | None = None) -> None:
    """Refuse (InvalidTimeTravelError) a time-travel read as of the 17-digit `as_of` whose snapshot the table does
    not hold whole; `given` is the query time as the user wrote it (named in the message when it differs)."""
    name = table.name
    what = f"--as-of {as_of}" if given is None or given == as_of else f"--as-of {given!r} ({as_of})"
    writes = timeline.completed_writes()
    first = writes.first()
    start = timeline.commits_start()
    if first is None:
        raise InvalidTimeTravelError(f"{what}: the table has no completed commit yet", instant_time=as_of, table=name)
    if start is not None and as_of < start and table.newest_archived() is not None:
        raise InvalidTimeTravelError(
            f"{what} is archived; the active timeline starts at {start}", instant_time=as_of, table=name
        )
    if as_of < first.requested_time:
        raise InvalidTimeTravelError(
            f"{what} is before the table's first commit {first.requested_time}", instant_time=as_of, table=name
        )
    pending = first_pending_write(table, timeline)
    if pending is not None and as_of >= pending.requested_time:
        raise InvalidTimeTravelError(
            f"{what} is at or after the pending {pending.action.value} {pending.requested_time}: the "
            f"snapshot would change when it completes; travel to an instant before it",
            instant_time=as_of,
            table=name,
        )
    retained = cleaner_retention(table, timeline)
    if retained is not None and as_of < retained.instant_time:
        raise InvalidTimeTravelError(
            f"{what} is older than the cleaner retains: {retained.reason}; the oldest exact as-of is "
            f"{retained.instant_time}",
            instant_time=as_of,
            table=name,
        )


def check_incremental(table: HudiTable, timeline: Timeline, start: str, end: str | None) -> None:
    """Refuse (InvalidTimeTravelError) an incremental read (`start`, `end`] that would silently miss rows: a start
    before the active timeline when instants were archived (archived commits are not read), or a range whose newest
    commit's snapshot the table no longer holds whole (`check_as_of`: cleaned file slices, a pending write before
    it)."""
    name = table.name
    first = timeline.commits_start()
    if first is not None and start < first and table.newest_archived() is not None:
        raise InvalidTimeTravelError(
            f"--start {start} is before the active timeline (it starts at {first}): commits archived since would be "
            "missed; start at or after it",
            instant_time=start,
            table=name,
        )
    in_range = incremental_instants(table, timeline, start, end)
    if in_range:
        newest = max(in_range)
        try:
            check_as_of(table, timeline, newest)
        except InvalidTimeTravelError as e:
            raise InvalidTimeTravelError(
                f"the range ({start}, {end or 'latest'}] ends at commit {newest}, and {e.problem}",
                instant_time=start,
                table=name,
            ) from e


def first_pending_write(table: HudiTable, timeline: Timeline) -> Instant | None:
    """The first pending commit, delta commit or replace commit that is not a clustering."""
    for instant in timeline.pending():
        if instant.action in (Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT) and not table.is_clustering(
            instant
        ):
            return instant
    return None


def cleaner_retention(table: HudiTable, timeline: Timeline) -> Retention | None:
    """The oldest instant whose snapshot every completed clean on the active timeline left whole (None: nothing was
    cleaned)."""
    cleans = [i for i in timeline.completed() if i.action is Action.CLEAN]
    if not cleans:
        return None
    found: list[Retention] = []
    deleted: dict[FileGroupId, str] = {}  # file group -> the clean that deleted files of it
    for instant in cleans:
        path = table.active.path_of(instant)
        md = decode_clean_metadata(table.active.read(instant), path=path)
        if instant is cleans[-1] and md.earliest_commit_to_retain:
            found.append(
                Retention(
                    md.earliest_commit_to_retain,
                    f"the earliest commit to retain of clean {instant.requested_time} is "
                    f"{md.earliest_commit_to_retain}",
                )
            )
        for partition, pm in md.partition_metadata.items():
            for location in pm.success_delete_files:
                file_id = _file_id(posixpath.basename(location))
                if file_id is not None:
                    deleted[(pm.partition_path or partition, file_id)] = instant.requested_time
    if deleted:
        view = table.file_system_view(timeline=timeline)
        groups = {g.id: g for g in view.all_file_groups()}
        for fg, clean_time in sorted(deleted.items()):
            group = groups.get(fg)
            where = f"{fg[0]}/{fg[1]}" if fg[0] else fg[1]
            if group is not None and group.slices:
                oldest = group.slices[-1].base_instant_time
                found.append(
                    Retention(
                        oldest, f"clean {clean_time} deleted older slices of file group {where}, kept from {oldest}"
                    )
                )
                continue
            replaced_at = view.inputs.replaced.get(fg)
            bound = replaced_at if replaced_at is not None else clean_time
            found.append(Retention(bound, f"clean {clean_time} deleted every file of file group {where}"))
    return max(found, key=lambda r: r.instant_time) if found else None


def _file_id(name: str) -> str | None:
    log = parse_log_file_name(name) if name.startswith(".") else None
    if log is not None:
        return log.file_id
    base = parse_base_file_name(name)
    return base.file_id if base is not None else None
