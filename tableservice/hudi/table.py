"""One Hudi table: its configuration, timeline, metadata files and file-system view.

The entry point of the format layer, in the spirit of Hudi's meta client: everything that needs to read a
table starts from `HudiTable.open`. Metadata of completed instants never changes, so it is decoded once and
cached by file name; a timeline reload costs one listing of the timeline folder.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from tableservice.errors import InvalidPlanError, InvalidTimelineError, TableServiceError
from tableservice.hudi.archive import ArchivedInstant, archived_completion_times, load_archived_instants
from tableservice.hudi.fsview import FileGroupId, FileSystemView, ViewInputs, partitions_from_listing
from tableservice.hudi.instant import Action, Instant, State
from tableservice.hudi.models import (
    HoodieClusteringPlan,
    HoodieCommitMetadata,
    HoodieCompactionPlan,
    HoodieReplaceCommitMetadata,
    HoodieRequestedReplaceMetadata,
    decode_commit_metadata,
    decode_compaction_plan,
    decode_replace_commit_metadata,
    decode_requested_replace_metadata,
)
from tableservice.hudi.table_config import TableConfig, load_table_config
from tableservice.hudi.timeline import ActiveTimeline, Timeline
from tableservice.storage import FileInfo, Storage, join

T = TypeVar("T")
P = TypeVar("P")

META_FIELDS = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)


class HudiTable:
    """A table at a base path. Not thread-safe; cheap to create."""

    def __init__(self, storage: Storage, base_path: str, config: TableConfig) -> None:
        self.storage = storage
        self.base_path = base_path.rstrip("/")
        self.config = config
        self.active = ActiveTimeline(storage, self.base_path, config)
        self._timeline: Timeline | None = None
        self._cache: dict[str, Any] = {}
        self._archived_completion: dict[str, str] | None = None

    @classmethod
    def open(cls, storage: Storage, base_path: str) -> HudiTable:
        return cls(storage, base_path, load_table_config(storage, base_path.rstrip("/")))

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def meta_path(self) -> str:
        return join(self.base_path, ".hoodie")

    # --- timeline ----------------------------------------------------------------------------------

    def timeline(self, *, reload: bool = False) -> Timeline:
        if self._timeline is None or reload:
            self._timeline = self.active.load()
        return self._timeline

    def reload(self) -> Timeline:
        return self.timeline(reload=True)

    def archived_instants(
        self, *, start: str | None = None, end: str | None = None, completed_only: bool = False
    ) -> list[ArchivedInstant]:
        """Instants moved out of the active timeline (v6 archive log, v8+ LSM history)."""
        return load_archived_instants(
            self.storage, self.base_path, self.config, start=start, end=end, completed_only=completed_only
        )

    def archived_completion_time(self, requested_time: str) -> str | None:
        """Completion time of an archived instant (loaded once, on first need)."""
        if self._archived_completion is None:
            self._archived_completion = archived_completion_times(self.storage, self.base_path, self.config)
        return self._archived_completion.get(requested_time)

    def _cached(self, instant: Instant, state: State, decode: Callable[[bytes, str], T]) -> T:
        """Decode an instant file once; pending files are re-read (they may still change state)."""
        path = self.active.path_of(instant.with_state(state, instant.completion_time))
        key = f"{path}#{decode.__qualname__}"
        if key in self._cache:
            return self._cache[key]  # type: ignore[no-any-return]
        try:
            value = decode(self.storage.read_bytes(path), path)
        except TableServiceError as e:
            raise e.with_context(table=self.name) from e
        if state is State.COMPLETED or state is State.REQUESTED:
            self._cache[key] = value
        return value

    # --- metadata ----------------------------------------------------------------------------------

    def commit_metadata(self, instant: Instant) -> HoodieCommitMetadata:
        """Metadata of a completed write instant (replace commits decode with their replace fields)."""
        if not instant.is_completed:
            raise InvalidPlanError(f"{instant} is not completed", table=self.name)
        if instant.completed_action(self.config.layout_version) is Action.REPLACE_COMMIT:
            return self.replace_commit_metadata(instant)
        return self._cached(instant, State.COMPLETED, lambda data, path: decode_commit_metadata(data, path=path))

    def replace_commit_metadata(self, instant: Instant) -> HoodieReplaceCommitMetadata:
        return self._cached(
            instant, State.COMPLETED, lambda data, path: decode_replace_commit_metadata(data, path=path)
        )

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
    ) -> tuple[Instant, P] | None:
        """Schedule an action: under `lock`, reload the timeline, take a new instant time (or `instant_time`, which
        must be above every instant on it), make the plan on that timeline and write `<t>.<action>.requested`.
        None, and nothing written, when `plan` returns None."""
        with lock():
            timeline = self.reload()
            t = instant_time if instant_time is not None else self.active.new_instant_time(timeline)
            if any(t <= x for x in timeline.all_times()):
                raise InvalidTimelineError(f"instant {t} is not above every instant on the timeline", table=self.name)
            made = plan(t, timeline)
            if made is None:
                return None
            return self.active.create_requested(t, action, encode(made)), made

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
                table=self.name,
                path=self.active.path_of(instant.with_state(State.REQUESTED)),
            )
        return md.clustering_plan

    def pending_clustering(self, timeline: Timeline | None = None) -> list[Instant]:
        tl = timeline if timeline is not None else self.timeline()
        return [
            i for i in tl.pending() if i.action in (Action.CLUSTERING, Action.REPLACE_COMMIT) and self.is_clustering(i)
        ]

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

    def list_data_files(self) -> dict[str, list[FileInfo]]:
        """One recursive listing of the table, grouped by partition."""
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
            listing if listing is not None else self.list_data_files(),
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
