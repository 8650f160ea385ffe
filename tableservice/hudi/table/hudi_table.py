"""One Hudi table: its configuration, timeline, metadata files and file-system view.

The entry point of the format layer, in the spirit of Hudi's meta client: everything that needs to read a
table starts from `HudiTable.open`.

The table holds the timeline it last loaded. `reload()` loads a fresh one (one listing of the timeline folder)
and reads `hoodie.properties` again when the timeline changed since it was last read (writers change it beside a
commit: enabling the metadata table, an upgrade) or `PROPERTIES_MAX_AGE_S` passed. A change this process commits
or schedules is applied to the held timeline without a listing where the new state is known exactly, else the
held timeline is dropped and the next `timeline()` loads one. Metadata of completed instants and plans never
change, so they are decoded once and kept in a bounded cache, cleared when the table's configuration changes.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tableservice.errors import InvalidPlanError, InvalidTimelineError, TableServiceError
from tableservice.hudi.file_group.merge_config import MergeConfig, merge_config_from_properties
from tableservice.hudi.models import (
    HoodieClusteringPlan,
    HoodieCommitMetadata,
    HoodieCompactionPlan,
    HoodieReplaceCommitMetadata,
    HoodieRequestedReplaceMetadata,
    HoodieRollbackMetadata,
    decode_commit_metadata,
    decode_compaction_plan,
    decode_replace_commit_metadata,
    decode_requested_replace_metadata,
    decode_rollback_metadata,
)
from tableservice.hudi.table.config import TableConfig, load_table_config
from tableservice.hudi.table.fs_view import FileGroupId, FileSystemView, ViewInputs, partitions_from_listing
from tableservice.hudi.timeline.active import ActiveTimeline, Timeline
from tableservice.hudi.timeline.archive import ArchivedInstant, load_archived_instants
from tableservice.hudi.timeline.archive_newest import completion_times_from, newest_archived
from tableservice.hudi.timeline.instant import Action, Instant, State
from tableservice.storage import FileInfo, Storage, join

T = TypeVar("T")
P = TypeVar("P")

PROPERTIES_MAX_AGE_S = 300.0
CACHE_ENTRIES = 4096

META_FIELDS = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)


@dataclass(frozen=True)
class Requested(Generic[P]):
    """A plan made for a new instant: its requested instant, the plan, the bytes of `<t>.<action>.requested` and
    that file's path; `written` is False for a dry run (nothing was written)."""

    instant: Instant
    plan: P
    content: bytes
    path: str
    written: bool


@dataclass(frozen=True)
class TableSnapshot:
    """The table as one pass sees it: its configuration and timeline, read together. Immutable: a step that needs
    a fresher view takes a new snapshot explicitly (`HudiTable.refresh()`, or `HudiTable.snapshot()` after this
    process changed the timeline). The archived timeline is read lazily through `table`."""

    table: HudiTable
    config: TableConfig
    timeline: Timeline

    @property
    def name(self) -> str:
        return self.config.name


class HudiTable:
    """A table at a base path. Not thread-safe; cheap to create."""

    def __init__(self, storage: Storage, base_path: str, config: TableConfig, *, label: str | None = None) -> None:
        self.storage = storage
        self._label = label
        self.base_path = base_path.rstrip("/")
        self.config = config
        self.active = ActiveTimeline(storage, self.base_path, config)
        self._timeline: Timeline | None = None
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._archived_completion: dict[str, str] = {}
        self._archived_loaded_from: str | None = None  # completion times loaded for instants at or after this
        self._config_mark: int | None = None  # the timeline as it was when the config was read
        self._config_read_at = time.monotonic()

    @classmethod
    def open(cls, storage: Storage, base_path: str, *, label: str | None = None) -> HudiTable:
        return cls(storage, base_path, load_table_config(storage, base_path.rstrip("/")), label=label)

    @property
    def name(self) -> str:
        """`hoodie.table.name`: what Hudi keys the table's locks and metadata table by."""
        return self.config.name

    @property
    def label(self) -> str:
        """The table's one name in the daemon (the configured `name`, else `hoodie.table.name`): what errors,
        log lines, metrics and outputs call it."""
        return self._label or self.config.name

    def relabel(self, label: str | None) -> None:
        """A new name in the daemon (the configuration renamed the table)."""
        self._label = label

    @property
    def meta_path(self) -> str:
        return join(self.base_path, ".hoodie")

    # --- timeline ----------------------------------------------------------------------------------

    def timeline(self, *, reload: bool = False) -> Timeline:
        """The timeline last loaded (loaded now if there is none, or with `reload`)."""
        if self._timeline is None or reload:
            return self.reload()
        return self._timeline

    def reload(self, *, sweep_temp_files: bool = False) -> Timeline:
        """A fresh timeline: one listing, plus `hoodie.properties` when it may have changed (module docstring).
        `sweep_temp_files` (under the table lock) also deletes stale temp files of the timeline folder."""
        timeline = self.active.load(sweep_temp_files=sweep_temp_files)
        mark = timeline.mark()
        if self._config_mark is None:
            self._config_mark = mark
        elif mark != self._config_mark or time.monotonic() - self._config_read_at > PROPERTIES_MAX_AGE_S:
            if self._reread_config():
                timeline = self.active.load()
                mark = timeline.mark()
            self._config_mark = mark
        self._timeline = timeline
        return timeline

    def refresh(self) -> TableSnapshot:
        """A new snapshot from storage (see `reload`)."""
        self.reload()
        return self.snapshot()

    def snapshot(self) -> TableSnapshot:
        """A snapshot of what the table holds now: the timeline its own commits left, or a fresh one when it holds
        none (see `applied` and `forget_timeline`)."""
        timeline = self.timeline()
        return TableSnapshot(self, self.config, timeline)

    def reload_config(self) -> TableConfig:
        """`hoodie.properties` read again now (after this process changed it)."""
        if self._reread_config():
            self._timeline = None
        return self.config

    def _reread_config(self) -> bool:
        """Read `hoodie.properties` again; True when it changed (the timeline must then be loaded again)."""
        config = load_table_config(self.storage, self.base_path)
        self._config_read_at = time.monotonic()
        if config.properties == self.config.properties:
            return False
        self.config = config
        self.active = ActiveTimeline(self.storage, self.base_path, config)
        self._cache.clear()
        self.forget_archive_reads()
        return True

    def applied(self, timeline: Timeline, instant: Instant) -> None:
        """This process wrote `instant` (a new state of an instant) on `timeline`, read under the table lock: hold
        the timeline with it, without a listing. Layout 1 infers completion times from file times, which only a
        listing gives: there the held timeline is dropped instead."""
        if self.config.layout_version < 2 and instant.is_completed:
            self._timeline = None
            return
        others = [
            i for i in timeline if not (i.requested_time == instant.requested_time and i.action is instant.action)
        ]
        self._timeline = Timeline(
            tuple(sorted([*others, instant], key=lambda i: i.sort_key)),
            timeline.layout_version,
            timeline.completed_mtimes,
        )

    def forget_timeline(self, unless_replaced: Timeline | None = None) -> None:
        """The timeline changed in a way not applied to the held one: the next `timeline()` loads it. With
        `unless_replaced`: only if the held timeline is still that one (nothing applied a change since)."""
        if unless_replaced is None or self._timeline is unless_replaced:
            self._timeline = None

    def archived_instants(
        self, *, start: str | None = None, end: str | None = None, completed_only: bool = False
    ) -> list[ArchivedInstant]:
        """Instants moved out of the active timeline (v6 archive log, v8+ LSM history): the whole range asked for.
        Commands only; a pass never reads the archive (see `newest_archived` for the newest part)."""
        return load_archived_instants(
            self.storage, self.base_path, self.config, start=start, end=end, completed_only=completed_only
        )

    def newest_archived(self, match: Callable[[ArchivedInstant], bool] = lambda a: True) -> ArchivedInstant | None:
        """The newest completed archived instant `match` accepts, reading the newest archive files only
        (`tableservice.hudi.timeline.archive_newest`)."""
        return newest_archived(self.storage, self.base_path, self.config, match)

    def forget_archive_reads(self) -> None:
        """Archival moved instants into the archive: completion times read from it before may miss them."""
        self._archived_completion, self._archived_loaded_from = {}, None

    def archived_completion_time(self, requested_time: str) -> str | None:
        """Completion time of an archived instant (a log file's delta commit that left the active timeline). Read
        on first need and only from `requested_time` on: the archive part newer than the instants asked before
        is read once, older parts when an older instant is asked for."""
        loaded_from = self._archived_loaded_from
        if loaded_from is None or requested_time < loaded_from:
            found = completion_times_from(self.storage, self.base_path, self.config, requested_time, loaded_from)
            self._archived_completion.update(found)
            self._archived_loaded_from = requested_time
        return self._archived_completion.get(requested_time)

    def _cached(self, instant: Instant, state: State, decode: Callable[[bytes, str], T]) -> T:
        """Decode an instant file once; pending files are re-read (they may still change state)."""
        path = self.active.path_of(instant.with_state(state, instant.completion_time))
        key = f"{path}#{decode.__qualname__}"
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]  # type: ignore[no-any-return]
        try:
            value = decode(self.storage.read_bytes(path), path)
        except TableServiceError as e:
            raise e.with_context(table=self.label) from e
        if state is State.COMPLETED or state is State.REQUESTED:
            self._cache[key] = value
            if len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return value

    # --- metadata ----------------------------------------------------------------------------------

    def commit_metadata(self, instant: Instant) -> HoodieCommitMetadata:
        """Metadata of a completed write instant (replace commits decode with their replace fields)."""
        if not instant.is_completed:
            raise InvalidPlanError(f"{instant} is not completed", table=self.label)
        if instant.completed_action(self.config.layout_version) is Action.REPLACE_COMMIT:
            return self.replace_commit_metadata(instant)
        return self._cached(instant, State.COMPLETED, lambda data, path: decode_commit_metadata(data, path=path))

    def replace_commit_metadata(self, instant: Instant) -> HoodieReplaceCommitMetadata:
        return self._cached(
            instant, State.COMPLETED, lambda data, path: decode_replace_commit_metadata(data, path=path)
        )

    def rollback_metadata(self, instant: Instant) -> HoodieRollbackMetadata:
        """Metadata of a completed rollback (the instants it undid are in `commits_rollback`)."""
        if not instant.is_completed:
            raise InvalidPlanError(f"{instant} is not completed", table=self.label)
        return self._cached(instant, State.COMPLETED, lambda data, path: decode_rollback_metadata(data, path=path))

    def compaction_plan(self, instant: Instant) -> HoodieCompactionPlan:
        return self._cached(instant, State.REQUESTED, lambda data, path: decode_compaction_plan(data, path=path))

    def requested_replace_metadata(self, instant: Instant) -> HoodieRequestedReplaceMetadata:
        return self._cached(
            instant, State.REQUESTED, lambda data, path: decode_requested_replace_metadata(data, path=path)
        )

    def request(
        self,
        action: Action,
        plan: Callable[[str, Timeline], P | None],
        encode: Callable[[P], bytes],
        *,
        lock: Callable[[], AbstractContextManager[object]],
        instant_time: str | None = None,
        dry_run: bool = False,
    ) -> Requested[P] | None:
        """Schedule an action: under `lock`, reload the timeline, take a new instant time (or `instant_time`, which
        must be above every instant on it), make the plan on that timeline and write `<t>.<action>.requested`.
        None, and nothing written, when `plan` returns None. A `dry_run` makes the same plan on the current
        timeline and writes nothing: no lock is taken (it excludes nobody) and no stale temp file is swept."""
        if dry_run:
            return self._plan_request(self.reload(), action, plan, encode, instant_time, written=False)
        with lock():
            timeline = self.reload(sweep_temp_files=True)  # killed writers' temp files go while we hold the lock
            made = self._plan_request(timeline, action, plan, encode, instant_time, written=True)
            if made is None:
                return None
            instant = self.active.create_requested(made.instant.requested_time, action, made.content)
            self.applied(timeline, instant)
            return made

    def _plan_request(
        self,
        timeline: Timeline,
        action: Action,
        plan: Callable[[str, Timeline], P | None],
        encode: Callable[[P], bytes],
        instant_time: str | None,
        *,
        written: bool,
    ) -> Requested[P] | None:
        t = instant_time if instant_time is not None else self.active.new_instant_time(timeline)
        if any(t <= x for x in timeline.all_times()):
            raise InvalidTimelineError(f"instant {t} is not above every instant on the timeline", table=self.label)
        made = plan(t, timeline)
        if made is None:
            return None
        instant = Instant(t, action, State.REQUESTED)
        return Requested(instant, made, encode(made), self.active.path_of(instant), written)

    def is_clustering(self, instant: Instant) -> bool:
        """Clustering is its own action from table version 8; in version 6 it is a replace commit whose
        requested metadata holds a clustering plan."""
        if instant.action is Action.CLUSTERING:
            return True
        if instant.action is not Action.REPLACE_COMMIT:
            return False
        try:
            return self.requested_replace_metadata(instant).is_clustering
        except TableServiceError:
            return False

    def clustering_plan(self, instant: Instant) -> HoodieClusteringPlan:
        md = self.requested_replace_metadata(instant)
        if md.clustering_plan is None:
            raise InvalidPlanError(
                f"{instant} holds no clustering plan",
                table=self.label,
                path=self.active.path_of(instant.with_state(State.REQUESTED)),
            )
        return md.clustering_plan

    def pending_clustering(self, timeline: Timeline | None = None) -> list[Instant]:
        tl = timeline if timeline is not None else self.timeline()
        return [
            i for i in tl.pending() if i.action in (Action.CLUSTERING, Action.REPLACE_COMMIT) and self.is_clustering(i)
        ]

    # --- merging ------------------------------------------------------------------------------------

    def merge_config(self) -> MergeConfig:
        """How the table merges records with the same key; InvalidTableConfigError or UnsupportedTableError
        naming `hoodie.properties` when it cannot be resolved (checked before any plan is written or run)."""
        try:
            return merge_config_from_properties(self.config.properties, self.config.version)
        except TableServiceError as e:
            raise e.with_context(table=self.label, path=self.config.path) from e

    # --- schema ------------------------------------------------------------------------------------

    def latest_schema(self, timeline: Timeline | None = None) -> dict[str, Any] | None:
        """The table's Avro schema (without meta fields): from the newest completed write that recorded one,
        else `hoodie.table.create.schema`."""
        tl = timeline if timeline is not None else self.timeline()
        for instant in reversed(tl.completed_writes().instants):
            try:
                text = self.commit_metadata(instant).table_schema
            except TableServiceError:
                continue
            if text:
                return _parse_schema(text, self.name, self.active.path_of(instant))
        create = self.config.create_schema
        if create:
            return _parse_schema(create, self.name, self.config.path)
        return None

    # --- file-system view --------------------------------------------------------------------------

    def view_inputs(self, timeline: Timeline) -> ViewInputs:
        replaced: dict[FileGroupId, str] = {}
        pending_compaction: dict[FileGroupId, str] = {}
        pending_log_compaction: dict[FileGroupId, str] = {}
        pending_clustering: dict[FileGroupId, str] = {}
        for instant in timeline:
            t = instant.requested_time
            if instant.is_completed and instant.completed_action(self.config.layout_version) is Action.REPLACE_COMMIT:
                md = self.replace_commit_metadata(instant)
                for partition, file_ids in (md.partition_to_replace_file_ids or {}).items():
                    for fid in file_ids:
                        replaced[(partition, fid)] = t
            elif not instant.is_completed and instant.action is Action.COMPACTION:
                for fg in self.compaction_plan(instant).file_group_ids():
                    pending_compaction[fg] = t
            elif not instant.is_completed and instant.action is Action.LOG_COMPACTION:
                for fg in self.compaction_plan(instant).file_group_ids():
                    pending_log_compaction[fg] = t
            elif not instant.is_completed and self.is_clustering(instant):
                for fg in self.clustering_plan(instant).file_group_ids():
                    pending_clustering[fg] = t
        return ViewInputs(replaced, pending_compaction, pending_log_compaction, pending_clustering)

    def list_data_files(self, timeline: Timeline | None = None) -> dict[str, list[FileInfo]]:
        """The table's files by partition: through the metadata table's `files` partition when the table has one
        (files of completed instants only, as of `timeline`), else one recursive storage listing."""
        # The metadata table is itself a HudiTable: its reader lives beside this class, not below it.
        from tableservice.hudi.metadata.listing import lists_through_metadata, metadata_listing

        if lists_through_metadata(self):
            return metadata_listing(self, timeline if timeline is not None else self.timeline())
        return self.list_storage_files()

    def list_storage_files(self) -> dict[str, list[FileInfo]]:
        """One recursive storage listing of the table, grouped by partition (every file, pending writes' too)."""
        return partitions_from_listing(self.base_path, self.storage.walk_files(self.base_path))

    def file_system_view(
        self,
        *,
        as_of: str | None = None,
        timeline: Timeline | None = None,
        listing: dict[str, list[FileInfo]] | None = None,
    ) -> FileSystemView:
        tl = timeline if timeline is not None else self.timeline()
        return FileSystemView(
            self.base_path,
            self.config.version,
            tl,
            listing if listing is not None else self.list_data_files(tl),
            self.view_inputs(tl),
            as_of=as_of,
            completion_time=self.archived_completion_time,
        )


def _parse_schema(text: str, table: str, path: str) -> dict[str, Any]:
    try:
        schema = json.loads(text)
    except ValueError as e:
        raise InvalidPlanError(f"table schema is not JSON: {e}", table=table, path=path) from e
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise InvalidPlanError("table schema is not an Avro record", table=table, path=path)
    return schema
