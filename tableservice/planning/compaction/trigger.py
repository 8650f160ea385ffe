"""When a compaction is due: Hudi's trigger strategies over the timeline, plus a log-bytes trigger.

Counting follows the Hudi release that writes each table version (ScheduleCompactionActionExecutor.needCompact
with CompactionUtils):

- Table versions 8 and 9 (Hudi 1.x, `getCompletedDeltaCommitsSinceLatestCompaction`): the last completed
  compaction is the newest completed `commit` (a merge-on-read table commits only compactions); the count is the
  completed delta commits that completed after that compaction's requested time (a delta commit requested before
  it but completed after it wrote into the compaction's new slice, so it counts). Without a completed
  compaction: every completed delta commit, timed from the first.
- Table version 6 (Hudi 0.14/0.15, `getDeltaCommitsSinceLatestCompaction`): delta commits in any state
  (requested, inflight, completed) requested after the newest completed `commit`; without one, all delta
  commits, timed from the first. (0.14 also took a completed replace commit as "last compaction"; 0.15 fixed
  that with HUDI-7532 and so do we.)
- NUM_COMMITS_AFTER_LAST_REQUEST (all versions, `getDeltaCommitsSinceLatestCompactionRequest`): delta commits
  in any state requested after the newest pending compaction, or if none is pending after the newest
  completed one.
- Elapsed time: from the requested time of the reference instant above (last compaction, or first delta commit)
  to `now`, both read in the table's time zone (`hoodie.table.timeline.timezone`); Hudi compares whole seconds
  (`max.delta.seconds <= seconds(now) - seconds(reference)`), so do we.
- No delta commit and no completed compaction: never due (Hudi's `needCompact` returns false).
- Log bytes (`tableservice.compaction.log.bytes.threshold`, ours): also due when the log files of the latest
  slices that a plan could take (file groups not under pending compaction, log compaction or clustering; in
  versions 8 and 9 committed log files only) hold at least that many bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from tableservice.errors import InvalidTimelineError
from tableservice.hudi.table.fs_view import FileSystemView
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant, parse_instant_time, timeline_timezone
from tableservice.planning.compaction.policy import CompactionPolicy, CompactionTriggerStrategy


@dataclass(frozen=True)
class CompactionTableState:
    """What the trigger looks at. `log_bytes` is measured only when asked for (it needs a file listing)."""

    table_name: str
    table_version: int
    is_mor: bool
    timeline: Timeline
    timezone: tzinfo
    log_bytes: int | None = None

    @classmethod
    def of(
        cls,
        table: HudiTable,
        policy: CompactionPolicy | None = None,
        *,
        timeline: Timeline | None = None,
        view: FileSystemView | None = None,
    ) -> CompactionTableState:
        """The state of `table`; log bytes are measured from `view` when given, else (with a listing) when the
        policy has a log-bytes threshold."""
        tl = timeline if timeline is not None else table.timeline()
        log_bytes = None
        if view is None and policy is not None and policy.log_bytes_threshold is not None and table.config.is_mor:
            view = table.file_system_view(timeline=tl)
        if view is not None:
            log_bytes = compactable_log_bytes(view)
        return cls(
            table_name=table.name,
            table_version=table.config.version,
            is_mor=table.config.is_mor,
            timeline=tl,
            timezone=timeline_timezone(table.config.timezone_name),
            log_bytes=log_bytes,
        )


@dataclass(frozen=True)
class DueDecision:
    due: bool
    reason: str
    delta_commits: int  # counted as the trigger strategy counts them
    seconds_since: float  # since the last compaction (or the first delta commit); 0 when neither exists
    log_bytes: int  # 0 when not measured
    next_due_at: datetime | None = None  # when the time trigger fires if nothing else changes (not due now)


def compactable_log_bytes(view: FileSystemView) -> int:
    """Bytes of log files in the latest slices a compaction plan could take."""
    excluded = view.inputs.under_pending_services()
    return sum(s.log_size for s in view.latest_slices() if s.file_group_id not in excluded)


# --- counting ------------------------------------------------------------------------------------------------


def _is_completed_compaction(i: Instant) -> bool:
    return i.is_completed and i.action in (Action.COMPACTION, Action.COMMIT)


def _is_delta_commit(i: Instant) -> bool:
    """Delta commits, and completed log compactions (whose completed file is a `deltacommit`)."""
    return i.action is Action.DELTA_COMMIT or (i.action is Action.LOG_COMPACTION and i.is_completed)


def delta_commits_since_compaction(timeline: Timeline, table_version: int) -> tuple[int, Instant] | None:
    """(delta commits counted, reference instant) as NUM_COMMITS and the time triggers count them."""
    compactions = [i for i in timeline if _is_completed_compaction(i)]
    deltas = [i for i in timeline if _is_delta_commit(i)]
    if table_version >= 8:
        deltas = [i for i in deltas if i.is_completed]
    if compactions:
        last = compactions[-1]
        t = last.requested_time
        if table_version >= 8:
            counted = [d for d in deltas if (d.completion_time or d.requested_time) > t and d.requested_time != t]
        else:
            counted = [d for d in deltas if d.requested_time > t]
        return len(counted), last
    if not deltas:
        return None
    return len(deltas), deltas[0]


def delta_commits_since_compaction_request(timeline: Timeline) -> tuple[int, Instant] | None:
    """(delta commits counted, reference instant) for NUM_COMMITS_AFTER_LAST_REQUEST."""
    pending = [i for i in timeline if i.action is Action.COMPACTION and not i.is_completed]
    completed = [i for i in timeline if _is_completed_compaction(i)]
    ref = pending[-1] if pending else (completed[-1] if completed else None)
    deltas = [i for i in timeline if _is_delta_commit(i)]
    if ref is not None:
        return len([d for d in deltas if d.requested_time > ref.requested_time]), ref
    if not deltas:
        return None
    return len(deltas), deltas[0]


def instant_moment(instant_time: str, tz: tzinfo) -> datetime:
    """The moment an instant time names; Hudi's special all-zero-date instants (`00000000000000`, the
    metadata table's `0000000000000000x`) read as the epoch, as Hudi reads `00000000000000`."""
    try:
        return parse_instant_time(instant_time, tz)
    except InvalidTimelineError:
        if instant_time[:8] == "00000000":
            return datetime(1970, 1, 1, tzinfo=UTC)
        raise


# --- the decision --------------------------------------------------------------------------------------------


def compaction_due(state: CompactionTableState, policy: CompactionPolicy, now: datetime) -> DueDecision:
    """Whether a compaction should be scheduled now (`now` must carry a time zone)."""
    if now.tzinfo is None:
        raise ValueError("`now` must be timezone-aware")
    threshold = policy.log_bytes_threshold
    if threshold is not None and state.log_bytes is None:
        raise ValueError("the policy has a log-bytes threshold: build the state with CompactionTableState.of(...)")
    log_bytes = state.log_bytes or 0
    if not state.is_mor:
        return DueDecision(False, "not a merge-on-read table", 0, 0.0, log_bytes)

    info = delta_commits_since_compaction(state.timeline, state.table_version)
    count = 0
    seconds = 0.0
    whole_seconds = 0
    ref_text = ""
    if info is not None:
        count, ref = info
        ref_moment = instant_moment(ref.requested_time, state.timezone)
        seconds = (now - ref_moment).total_seconds()
        whole_seconds = int(now.timestamp() * 1000) // 1000 - int(ref_moment.timestamp() * 1000) // 1000
        kind = "last compaction" if _is_completed_compaction(ref) else "first delta commit"
        ref_text = f"{kind} {ref.requested_time}"

    trigger = policy.trigger_strategy
    n_max, s_max = policy.max_delta_commits, policy.max_delta_seconds
    due = False
    why = "no delta commits yet"
    at: datetime | None = None
    if info is not None:
        by_time = s_max <= whole_seconds
        # Hudi compares whole seconds: due from the second `s_max` after the reference instant's second.
        fires = datetime.fromtimestamp(int(ref_moment.timestamp() * 1000) // 1000 + s_max, UTC)
        time_text = f"{whole_seconds}s since {ref_text} (threshold {s_max}s)"
        if trigger is CompactionTriggerStrategy.NUM_COMMITS_AFTER_LAST_REQUEST:
            req = delta_commits_since_compaction_request(state.timeline)
            count = req[0] if req is not None else 0
            ref_req = req[1].requested_time if req is not None else "-"
            due = req is not None and n_max <= count
            why = f"{count} delta commits since compaction request {ref_req} (threshold {n_max})"
        else:
            by_num = n_max <= count
            num_text = f"{count} delta commits since {ref_text} (threshold {n_max})"
            if trigger is CompactionTriggerStrategy.NUM_COMMITS:
                due, why = by_num, num_text
            elif trigger is CompactionTriggerStrategy.TIME_ELAPSED:
                due, why, at = by_time, time_text, fires
            elif trigger is CompactionTriggerStrategy.NUM_OR_TIME:
                due, why, at = by_num or by_time, f"{num_text} or {time_text}", fires
            else:
                due, why = by_num and by_time, f"{num_text} and {time_text}"
                at = fires if by_num else None
    if not due and threshold is not None and log_bytes >= threshold:
        due, why = True, f"{log_bytes} bytes of log files to compact (threshold {threshold}); {why}"
    if not policy.enabled:
        return DueDecision(False, f"compaction scheduling is disabled; {why}", count, seconds, log_bytes)
    next_at = None if due or at is None else max(at, now.astimezone(UTC))
    return DueDecision(due, ("due: " if due else "not due: ") + why, count, seconds, log_bytes, next_at)
