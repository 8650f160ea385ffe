"""How a Hudi table merges versions of one record: merge mode, ordering fields, partial updates, custom mergers.

Rules (Apache Hudi 1.x, `HoodieTableConfig.inferCorrectMergingBehavior`, `HoodieFileGroupReader`,
`EightToNineUpgradeHandler`, `HoodieRecordPayload.getPayloadClassName`):

- v8 / v9: `hoodie.record.merge.mode` is authoritative (Hudi 1.x writes it when it creates or upgrades a table).
- v6 (and v8 / v9 without the key): inferred from the payload class (`hoodie.compaction.payload.class`, v9
  `hoodie.table.legacy.payload.class`; absent means `DefaultHoodieRecordPayload`) and the strategy id
  (`hoodie.record.merge.strategy.id`, v6 alias `hoodie.compaction.record.merger.strategy`). v6 and v9 look at the
  payload first, v8 at the strategy id first. `DefaultHoodieRecordPayload` / `EventTimeAvroPayload` and the
  event-time strategy mean EVENT_TIME_ORDERING, `OverwriteWithLatestAvroPayload` and the commit-time strategy mean
  COMMIT_TIME_ORDERING, anything else CUSTOM.
- Ordering fields: v9 `hoodie.table.ordering.fields` (comma-separated, compared as a tuple), before v9
  `hoodie.table.precombine.field`.
- Partial updates: v9 `hoodie.table.partial.update.mode`; older tables get the same behaviour from the payload
  classes that v9's upgrade maps (`PartialUpdateAvroPayload`, `OverwriteNonDefaultsWithLatestAvroPayload`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from tableservice.errors import InvalidTableConfigError, UnsupportedTableError

__all__ = [
    "COMMIT_TIME_STRATEGY_ID",
    "CUSTOM_STRATEGY_ID",
    "EVENT_TIME_STRATEGY_ID",
    "PAYLOAD_STRATEGY_ID",
    "MergeConfig",
    "MergeMode",
    "PartialUpdateMode",
    "RecordMerger",
    "merge_config_from_properties",
    "register_merger",
    "registered_merger",
    "unregister_merger",
]

# HoodieRecordMerger's strategy ids (1.x). The event-time id is also 0.x's DEFAULT_MERGER_STRATEGY_UUID.
EVENT_TIME_STRATEGY_ID = "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
COMMIT_TIME_STRATEGY_ID = "ce9acb64-bde0-424c-9b91-f6ebba25356d"
CUSTOM_STRATEGY_ID = "1897ef5f-18bc-4557-939c-9d6a8afd1519"
PAYLOAD_STRATEGY_ID = "00000000-0000-0000-0000-000000000000"

_PKG = "org.apache.hudi.common.model."
DEFAULT_PAYLOAD = _PKG + "DefaultHoodieRecordPayload"
EVENT_TIME_PAYLOAD = _PKG + "EventTimeAvroPayload"
OVERWRITE_LATEST_PAYLOAD = _PKG + "OverwriteWithLatestAvroPayload"
PARTIAL_UPDATE_PAYLOAD = _PKG + "PartialUpdateAvroPayload"
OVERWRITE_NON_DEFAULTS_PAYLOAD = _PKG + "OverwriteNonDefaultsWithLatestAvroPayload"
AWS_DMS_PAYLOAD = _PKG + "AWSDmsAvroPayload"

_KEY_MODE = "hoodie.record.merge.mode"
_KEY_STRATEGY = "hoodie.record.merge.strategy.id"
_KEY_STRATEGY_V6 = "hoodie.compaction.record.merger.strategy"
_KEY_PAYLOAD = "hoodie.compaction.payload.class"
_KEY_LEGACY_PAYLOAD = "hoodie.table.legacy.payload.class"
_KEY_ORDERING = "hoodie.table.ordering.fields"
_KEY_PRECOMBINE = "hoodie.table.precombine.field"
_KEY_PARTIAL = "hoodie.table.partial.update.mode"
_MERGE_PROP = "hoodie.record.merge.property."
_KEYS_DELETE_FIELD = (_MERGE_PROP + "hoodie.payload.delete.field", "hoodie.payload.delete.field")
_KEYS_DELETE_MARKER = (_MERGE_PROP + "hoodie.payload.delete.marker", "hoodie.payload.delete.marker")
_KEYS_UNAVAILABLE = (
    _MERGE_PROP + "hoodie.write.partial.update.unavailable.value",
    _MERGE_PROP + "partial.update.unavailable.value",
)

SUPPORTED_TABLE_VERSIONS = (6, 8, 9)
_E = TypeVar("_E", bound=Enum)


class MergeMode(StrEnum):
    """`RecordMergeMode`: which of two versions of a record key survives."""

    COMMIT_TIME_ORDERING = "COMMIT_TIME_ORDERING"
    EVENT_TIME_ORDERING = "EVENT_TIME_ORDERING"
    CUSTOM = "CUSTOM"


class PartialUpdateMode(StrEnum):
    """`PartialUpdateMode`: which columns of the winning version are taken from the losing one."""

    NONE = "NONE"
    KEEP_VALUES = "KEEP_VALUES"  # columns the winner does not carry (log blocks with the IS_PARTIAL header)
    IGNORE_DEFAULTS = "IGNORE_DEFAULTS"  # columns that are null in the winner
    FILL_UNAVAILABLE = "FILL_UNAVAILABLE"  # string / binary columns equal to `unavailable_marker` in the winner


@dataclass(frozen=True)
class MergeConfig:
    """The merge semantics of one table.

    `custom_merger` is the registry key (see `register_merger`) of the merger used in CUSTOM mode.
    `delete_field` / `delete_marker`: a data record whose `delete_field` equals `delete_marker` is a delete
    (besides `_hoodie_is_deleted = true` and `_hoodie_operation = 'D'`, which always are).
    """

    mode: MergeMode
    ordering_fields: tuple[str, ...] = ()
    strategy_id: str | None = None
    partial_update_mode: PartialUpdateMode = PartialUpdateMode.NONE
    payload_class: str | None = None
    custom_merger: str | None = None
    delete_field: str | None = None
    delete_marker: str | None = None
    unavailable_marker: str | None = None

    def __post_init__(self) -> None:
        if self.mode is MergeMode.CUSTOM and not self.custom_merger:
            raise InvalidTableConfigError("merge mode CUSTOM needs a custom merger key")
        if self.partial_update_mode is PartialUpdateMode.FILL_UNAVAILABLE and self.unavailable_marker is None:
            raise InvalidTableConfigError("partial update mode FILL_UNAVAILABLE needs an unavailable marker value")
        if (self.delete_field is None) != (self.delete_marker is None):
            raise InvalidTableConfigError(
                f"delete field {self.delete_field!r} and delete marker {self.delete_marker!r} must be set together"
            )

    @property
    def partial_update(self) -> bool:
        """True when the table declares partial updates (IS_PARTIAL log blocks can occur regardless)."""
        return self.partial_update_mode is not PartialUpdateMode.NONE


@runtime_checkable
class RecordMerger(Protocol):
    """A CUSTOM-mode merger over Arrow tables.

    `older` and `newer` hold versions of the same record keys, row i of one with row i of the other, with the
    same columns (the data columns, incl. `_hoodie_record_key`). Rows of deletes carry only the key and the
    ordering fields (other columns null) and are flagged in `older_deleted` / `newer_deleted`. Return the merged
    rows (same length and columns, row i merging row i of both) and a mask of the rows that are deletes. Like
    Hudi's `HoodieRecordMerger.merge`, the function must be associative.
    """

    def merge(
        self,
        older: pa.Table,
        newer: pa.Table,
        older_deleted: npt.NDArray[np.bool_],
        newer_deleted: npt.NDArray[np.bool_],
        config: MergeConfig,
    ) -> tuple[pa.Table, npt.NDArray[np.bool_]]: ...


_REGISTRY: dict[str, RecordMerger] = {}
_REGISTRY_LOCK = threading.Lock()


def register_merger(strategy_id: str, merger: RecordMerger) -> None:
    """Register `merger` for tables whose merge strategy id (or, for payload-based tables, payload class) is
    `strategy_id`. Registering again replaces the previous merger."""
    if not strategy_id:
        raise ValueError("strategy id must not be empty")
    with _REGISTRY_LOCK:
        _REGISTRY[strategy_id] = merger


def unregister_merger(strategy_id: str) -> None:
    with _REGISTRY_LOCK:
        _REGISTRY.pop(strategy_id, None)


def registered_merger(strategy_id: str) -> RecordMerger:
    """The merger registered under `strategy_id`; UnsupportedTableError when there is none."""
    with _REGISTRY_LOCK:
        merger = _REGISTRY.get(strategy_id)
    if merger is None:
        raise UnsupportedTableError(f"no record merger registered for merge strategy {strategy_id!r}")
    return merger


def _is_registered(strategy_id: str) -> bool:
    with _REGISTRY_LOCK:
        return strategy_id in _REGISTRY


def _first(props: Mapping[str, str], *keys: str) -> str | None:
    for key in keys:
        value = props.get(key)
        if value is not None and value.strip():
            return value.strip()
    return None


def _mode_from_payload(payload: str | None) -> MergeMode | None:
    if not payload:
        return None
    if payload in (DEFAULT_PAYLOAD, EVENT_TIME_PAYLOAD):
        return MergeMode.EVENT_TIME_ORDERING
    if payload == OVERWRITE_LATEST_PAYLOAD:
        return MergeMode.COMMIT_TIME_ORDERING
    return MergeMode.CUSTOM


def _mode_from_strategy(strategy: str | None) -> MergeMode | None:
    if not strategy:
        return None
    if strategy == EVENT_TIME_STRATEGY_ID:
        return MergeMode.EVENT_TIME_ORDERING
    if strategy == COMMIT_TIME_STRATEGY_ID:
        return MergeMode.COMMIT_TIME_ORDERING
    return MergeMode.CUSTOM


def _infer_mode(payload: str | None, strategy: str | None, ordering: tuple[str, ...], version: int) -> MergeMode:
    """`inferCorrectMergingBehavior` for the mode, given the effective payload class."""
    by_payload = _mode_from_payload(payload)
    by_strategy = _mode_from_strategy(strategy)
    if by_payload is None and by_strategy is None:
        return MergeMode.EVENT_TIME_ORDERING if ordering else MergeMode.COMMIT_TIME_ORDERING
    first, second = (by_strategy, by_payload) if version == 8 else (by_payload, by_strategy)
    result = first if first is not None else second
    assert result is not None
    return result


# Payload classes whose semantics Hudi 1.1's v8 -> v9 upgrade maps onto built-in merge modes.
_PAYLOAD_SEMANTICS: dict[str, tuple[MergeMode, PartialUpdateMode]] = {
    DEFAULT_PAYLOAD: (MergeMode.EVENT_TIME_ORDERING, PartialUpdateMode.NONE),
    EVENT_TIME_PAYLOAD: (MergeMode.EVENT_TIME_ORDERING, PartialUpdateMode.NONE),
    OVERWRITE_LATEST_PAYLOAD: (MergeMode.COMMIT_TIME_ORDERING, PartialUpdateMode.NONE),
    PARTIAL_UPDATE_PAYLOAD: (MergeMode.EVENT_TIME_ORDERING, PartialUpdateMode.IGNORE_DEFAULTS),
    OVERWRITE_NON_DEFAULTS_PAYLOAD: (MergeMode.COMMIT_TIME_ORDERING, PartialUpdateMode.IGNORE_DEFAULTS),
    AWS_DMS_PAYLOAD: (MergeMode.COMMIT_TIME_ORDERING, PartialUpdateMode.NONE),
}
_BUILTIN_STRATEGIES = (EVENT_TIME_STRATEGY_ID, COMMIT_TIME_STRATEGY_ID, PAYLOAD_STRATEGY_ID)


def _parse_enum(cls: type[_E], key: str, value: str) -> _E:
    try:
        return cls(value.strip().upper())
    except ValueError:
        raise InvalidTableConfigError(f"{key}={value!r} is not one of {[m.value for m in cls]}") from None


def merge_config_from_properties(props: Mapping[str, str], table_version: int) -> MergeConfig:
    """The merge semantics of a table from its `hoodie.properties` and table version (6, 8 or 9).

    Raises UnsupportedTableError for other table versions and for CUSTOM tables whose strategy id (or payload
    class) has no registered merger and no known built-in equivalent.
    """
    if table_version not in SUPPORTED_TABLE_VERSIONS:
        raise UnsupportedTableError(f"table version {table_version} is not supported (only 6, 8 and 9)")
    raw_ordering = (
        _first(props, _KEY_ORDERING, _KEY_PRECOMBINE)
        if table_version >= 9
        else _first(props, _KEY_PRECOMBINE, _KEY_ORDERING)
    )
    ordering = tuple(f.strip() for f in (raw_ordering or "").split(",") if f.strip())
    strategy = _first(props, _KEY_STRATEGY, _KEY_STRATEGY_V6)
    payload = _first(props, _KEY_PAYLOAD, _KEY_LEGACY_PAYLOAD)
    if payload is not None:
        payload = payload.replace("com.uber.hoodie", "org.apache.hudi")
    raw_mode = _first(props, _KEY_MODE)

    if raw_mode is not None and table_version >= 8:
        mode = _parse_enum(MergeMode, _KEY_MODE, raw_mode)
    else:
        # HoodieRecordPayload.getPayloadClassName: no payload class means DefaultHoodieRecordPayload.
        mode = _infer_mode(payload or DEFAULT_PAYLOAD, strategy, ordering, table_version)

    raw_partial = _first(props, _KEY_PARTIAL)
    partial = _parse_enum(PartialUpdateMode, _KEY_PARTIAL, raw_partial) if raw_partial else PartialUpdateMode.NONE
    delete_field = _first(props, *_KEYS_DELETE_FIELD)
    delete_marker = _first(props, *_KEYS_DELETE_MARKER)
    unavailable = _first(props, *_KEYS_UNAVAILABLE)
    custom: str | None = None

    if mode is MergeMode.CUSTOM:
        if strategy is not None and strategy not in _BUILTIN_STRATEGIES:
            if not _is_registered(strategy):
                raise UnsupportedTableError(
                    f"record merge strategy {strategy!r} (payload class {payload!r}) has no registered merger"
                )
            custom = strategy
        elif payload is not None and _is_registered(payload):
            custom = payload
        elif payload in _PAYLOAD_SEMANTICS:
            mode, payload_partial = _PAYLOAD_SEMANTICS[payload]
            if partial is PartialUpdateMode.NONE:
                partial = payload_partial
            if payload == AWS_DMS_PAYLOAD and delete_field is None:
                delete_field, delete_marker = "Op", "D"
        else:
            raise UnsupportedTableError(
                f"payload class {payload!r} (merge strategy {strategy!r}) has no registered merger"
            )
    if partial is PartialUpdateMode.FILL_UNAVAILABLE and unavailable is None:
        raise InvalidTableConfigError(f"{_KEY_PARTIAL}=FILL_UNAVAILABLE without {_KEYS_UNAVAILABLE[0]}")
    if (delete_field is None) != (delete_marker is None):
        raise InvalidTableConfigError(
            f"delete field {delete_field!r} and delete marker {delete_marker!r} must be set together"
        )
    return MergeConfig(
        mode=mode,
        ordering_fields=ordering,
        strategy_id=strategy,
        partial_update_mode=partial,
        payload_class=payload,
        custom_merger=custom,
        delete_field=delete_field,
        delete_marker=delete_marker,
        unavailable_marker=unavailable,
    )
