"""What the archived timeline holds, whatever its layout: `ArchivedInstant` (read) and `ArchiveSource` (written).

See `tableservice.hudi.timeline.archive` for the on-disk layouts and the facts they follow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tableservice.errors import CorruptFileError, InvalidPlanError, TableServiceError
from tableservice.hudi.models import (
    HoodieArchivedMetaEntry,
    TimelineContent,
    archived_meta_entry_from_record,
    decode_clean_metadata,
    decode_cleaner_plan,
    decode_commit_metadata,
    decode_compaction_plan,
    decode_index_commit_metadata,
    decode_index_plan,
    decode_replace_commit_metadata,
    decode_requested_replace_metadata,
    decode_rollback_metadata,
    decode_rollback_plan,
    decode_savepoint_metadata,
    is_avro_container,
    read_avro_container_with_schema,
)
from tableservice.hudi.models.avsc_builders import schema_full_name
from tableservice.hudi.timeline.instant import Action, Instant, State

_Decoder = Callable[..., TimelineContent]

# Completed-file content by (completed) action, for LSM rows.
_METADATA_DECODERS: Final[dict[str, _Decoder]] = {
    "commit": decode_commit_metadata,
    "deltacommit": decode_commit_metadata,
    "replacecommit": decode_replace_commit_metadata,
    "clean": decode_clean_metadata,
    "rollback": decode_rollback_metadata,
    "savepoint": decode_savepoint_metadata,
    "indexing": decode_index_commit_metadata,
}
# Plan bytes by the record name of their Avro writer schema (LSM rows do not say which pending action wrote them).
_PLAN_DECODERS: Final[dict[str, _Decoder]] = {
    "org.apache.hudi.avro.model.HoodieCompactionPlan": decode_compaction_plan,
    "org.apache.hudi.avro.model.HoodieRequestedReplaceMetadata": decode_requested_replace_metadata,
    "org.apache.hudi.avro.model.HoodieCleanerPlan": decode_cleaner_plan,
    "org.apache.hudi.avro.model.HoodieCommitMetadata": decode_commit_metadata,
    "org.apache.hudi.avro.model.HoodieReplaceCommitMetadata": decode_commit_metadata,
    "org.apache.hudi.avro.model.HoodieRollbackPlan": decode_rollback_plan,
    "org.apache.hudi.avro.model.HoodieIndexPlan": decode_index_plan,
}


def parse_action(value: object, *, path: str) -> Action:
    try:
        return Action(str(value))
    except ValueError:
        raise CorruptFileError(f"archived instant has unknown action {value!r}", path=path) from None


def parse_state(value: object, *, path: str) -> State:
    """`actionState` of a v6 archive entry; very old entries have none and count as completed (as in Hudi)."""
    if value is None:
        return State.COMPLETED
    try:
        return State[str(value)]
    except KeyError:
        raise CorruptFileError(f"archived instant has unknown state {value!r}", path=path) from None


@dataclass(frozen=True)
class ArchivedInstant:
    """One instant read from the archived timeline.

    v8/v9 (LSM history): one per completed instant; `action` is the completed action (`commit` for a compaction,
    `replacecommit` for a clustering), `metadata` the completed file's bytes and `plan` the plan's bytes.
    v6 (archive log): one per archived timeline file, so an instant appears once per state; `action` is that file's
    action; `entry` is the raw `HoodieArchivedMetaEntry` record; `completion_time` is the entry's
    `stateTransitionTime` for completed entries (absent in archives written before Hudi 0.14).
    `location` names the archive file the instant was read from.
    """

    requested_time: str
    action: Action
    state: State
    completion_time: str | None
    location: str
    state_transition_time: str | None = None
    metadata: bytes | None = field(default=None, repr=False, compare=False)
    plan: bytes | None = field(default=None, repr=False, compare=False)
    entry: Mapping[str, Any] | None = field(default=None, repr=False, compare=False, hash=False)

    @property
    def sort_key(self) -> tuple[str, str, int]:
        return self.to_instant().sort_key

    @property
    def is_completed(self) -> bool:
        return self.state is State.COMPLETED

    def to_instant(self) -> Instant:
        return Instant(self.requested_time, self.action, self.state, self.completion_time)

    # --- lazy decoding -----------------------------------------------------------------------------

    def archived_meta_entry(self) -> HoodieArchivedMetaEntry:
        """The v6 entry as our model (InvalidPlanError naming the archive file when it does not validate)."""
        if self.entry is None:
            raise InvalidPlanError(f"{self.describe()} is an LSM row, not an archive log entry", path=self.location)
        return archived_meta_entry_from_record(self.entry, path=self.location)

    def decode_metadata(self) -> TimelineContent | None:
        """v8+: the completed file's content. v6: the content of this entry's timeline file, as embedded.
        None when nothing was archived for it."""
        try:
            if self.entry is not None:
                return _entry_content(self.archived_meta_entry(), self.action, self.state)
            if self.metadata is None:
                return None
            decoder = _METADATA_DECODERS.get(self.action.value)
            if decoder is None:
                raise InvalidPlanError(f"no metadata model for archived action {self.action.value!r}")
            return decoder(self.metadata, path=self.location)
        except TableServiceError as e:
            raise _named(e, self) from e

    def decode_plan(self) -> TimelineContent | None:
        """The plan archived with the instant: compaction plan, requested replace metadata (clustering or insert
        overwrite), cleaner plan, or an inflight replace commit's metadata. None when there is none."""
        try:
            if self.entry is not None:
                return _entry_plan(self.archived_meta_entry(), self.action, self.state)
            if self.plan is None:
                return None
            return decode_plan_bytes(self.plan, path=self.location)
        except TableServiceError as e:
            raise _named(e, self) from e

    def describe(self) -> str:
        return f"archived instant {self.requested_time} {self.action.value} {self.state.name}"


def _named(e: TableServiceError, inst: ArchivedInstant) -> TableServiceError:
    """The same error, also naming the archived instant and the archive file."""
    return type(e)(f"{inst.describe()}: {e.problem}", table=e.table, path=e.path or inst.location)


def decode_plan_bytes(data: bytes, *, path: str) -> TimelineContent:
    """Plan bytes of an LSM row, decoded by their Avro record name (JSON is a v6-era inflight commit)."""
    if not is_avro_container(data):
        return decode_commit_metadata(data, path=path)
    schema, _ = read_avro_container_with_schema(data, path=path)
    name = schema_full_name(schema)
    decoder = _PLAN_DECODERS.get(name)
    if decoder is None:
        raise InvalidPlanError(f"archived plan holds a {name} record, which is no plan", path=path)
    return decoder(data, path=path)


def _entry_content(entry: HoodieArchivedMetaEntry, action: Action, state: State) -> TimelineContent | None:
    """The field of a v6 entry that holds the archived file's content (Hudi's ArchivedTimelineV1 key per action)."""
    if action in (Action.COMMIT, Action.DELTA_COMMIT):
        return entry.hoodie_commit_metadata
    if action is Action.CLEAN:
        return entry.hoodie_clean_metadata if state is State.COMPLETED else entry.hoodie_cleaner_plan
    if action is Action.ROLLBACK:
        return entry.hoodie_rollback_metadata
    if action is Action.SAVEPOINT:
        return entry.hoodie_save_point_metadata
    if action in (Action.COMPACTION, Action.LOG_COMPACTION):
        return entry.hoodie_compaction_plan
    if action in (Action.REPLACE_COMMIT, Action.CLUSTERING):
        if state is State.REQUESTED:
            return entry.hoodie_requested_replace_metadata
        if state is State.INFLIGHT:
            return entry.hoodie_inflight_replace_metadata
        return entry.hoodie_replace_commit_metadata
    if action is Action.INDEXING:
        return entry.hoodie_index_commit_metadata
    return None


def _entry_plan(entry: HoodieArchivedMetaEntry, action: Action, state: State) -> TimelineContent | None:
    if action in (Action.COMPACTION, Action.LOG_COMPACTION):
        return entry.hoodie_compaction_plan
    if action is Action.CLEAN and state is not State.COMPLETED:
        return entry.hoodie_cleaner_plan
    if action in (Action.REPLACE_COMMIT, Action.CLUSTERING) and state is not State.COMPLETED:
        return _entry_content(entry, action, state)
    return None


@dataclass(frozen=True)
class ArchiveSource:
    """One completed instant to archive, with the bytes of its timeline files.

    `instant` is completed and keeps the action it was requested as (compaction, clustering...), as our
    timeline does; layout 2 needs its `completion_time`. `requested` / `inflight` are None when the file does not
    exist. `transition_times` (v6 only) maps a state to its file's modification time as an instant time, which
    Hudi 0.14+ records as `stateTransitionTime`.
    """

    instant: Instant
    completed: bytes
    requested: bytes | None = None
    inflight: bytes | None = None
    transition_times: Mapping[State, str] = field(default_factory=dict)

    def content(self, state: State) -> bytes | None:
        if state is State.COMPLETED:
            return self.completed
        return self.inflight if state is State.INFLIGHT else self.requested


def in_range(instant_time: str, start: str | None, end: str | None) -> bool:
    """`start <= instant_time <= end`, either bound optional."""
    return (start is None or instant_time >= start) and (end is None or instant_time <= end)
