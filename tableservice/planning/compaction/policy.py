"""The compaction policy of one table: when to schedule a compaction and which file slices a plan takes.

Keys and defaults are Hudi's (`HoodieCompactionConfig`, `HoodieStorageConfig`), so a writer's configuration can
be copied over as it is; `tableservice.compaction.*` keys are this project's own:

- `tableservice.compaction.enabled` (true): schedule compactions when due.
- `hoodie.compact.inline.trigger.strategy` (NUM_COMMITS): also NUM_COMMITS_AFTER_LAST_REQUEST, TIME_ELAPSED,
  NUM_AND_TIME, NUM_OR_TIME.
- `hoodie.compact.inline.max.delta.commits` (5): delta commits that make a compaction due.
- `hoodie.compact.inline.max.delta.seconds` (3600): seconds that make a compaction due.
- `hoodie.compaction.strategy` (LogFileSizeBasedCompactionStrategy): also UnBoundedCompactionStrategy and
  DayBasedCompactionStrategy, by full or short class name.
- `hoodie.compaction.target.io` (512000): MB of read + write IO one plan may take (LogFileSizeBased).
- `hoodie.compaction.logfile.size.threshold` (0): log bytes a slice needs to be compacted (LogFileSizeBased).
- `hoodie.compaction.daybased.target.partitions` (10): newest `yyyy/MM/dd` partitions a plan takes (DayBased).
- `hoodie.parquet.max.file.size` (125829120): the write size assumed for a slice without base file.
- `tableservice.compaction.log.bytes.threshold` (off): also due once the log files of the latest slices a plan
  could take hold this many bytes.
- `hoodie.memory.compaction.max.size` (unset): bytes the log records of one slice may take in a compaction
  task before its merge spills to the executor's local dirs (`hudi/file_group/spill.py`).
- `hoodie.memory.compaction.fraction` (0.6): without max.size, the share of the executor's user memory per task
  that is the budget (Hudi's formula, see `spill.compaction_memory_budget`).
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

from pydantic import Field, field_validator

from tableservice.planning.keyed_policy import MAX_BYTES, MAX_COUNT, MAX_MB, MAX_SECONDS, HudiKeyedPolicy

_STRATEGY_PACKAGE = "org.apache.hudi.table.action.compact.strategy."


class CompactionTriggerStrategy(enum.StrEnum):
    """Hudi's `CompactionTriggerStrategy`."""

    NUM_COMMITS = "NUM_COMMITS"
    NUM_COMMITS_AFTER_LAST_REQUEST = "NUM_COMMITS_AFTER_LAST_REQUEST"
    TIME_ELAPSED = "TIME_ELAPSED"
    NUM_AND_TIME = "NUM_AND_TIME"
    NUM_OR_TIME = "NUM_OR_TIME"


class CompactionStrategyName(enum.StrEnum):
    """The compaction strategies this project plans with, by Hudi's class name."""

    LOG_FILE_SIZE_BASED = _STRATEGY_PACKAGE + "LogFileSizeBasedCompactionStrategy"
    UNBOUNDED = _STRATEGY_PACKAGE + "UnBoundedCompactionStrategy"
    DAY_BASED = _STRATEGY_PACKAGE + "DayBasedCompactionStrategy"

    @property
    def short_name(self) -> str:
        return self.value.rsplit(".", 1)[1]


MB = 1024 * 1024
DEFAULT_PARQUET_MAX_FILE_SIZE = 120 * MB
# Keys under these prefixes are compaction settings: with `strict`, an unknown one is an error (a typo).
_OWN_PREFIXES = ("hoodie.compact.", "hoodie.compaction.", "tableservice.compaction.")


class CompactionPolicy(HudiKeyedPolicy):
    """Frozen; build it with Hudi's keys (`CompactionPolicy.from_mapping({...})`, `model_validate`) or with the
    attribute names as keywords. Invalid values raise a pydantic ValidationError (direct construction) or a ConfigError
    (`from_mapping`), both naming the key and the value."""

    service_name: ClassVar[str] = "compaction"
    own_prefixes: ClassVar[tuple[str, ...]] = _OWN_PREFIXES

    enabled: bool = Field(
        default=True,
        validation_alias="tableservice.compaction.enabled",
        serialization_alias="tableservice.compaction.enabled",
    )
    trigger_strategy: CompactionTriggerStrategy = Field(
        default=CompactionTriggerStrategy.NUM_COMMITS,
        validation_alias="hoodie.compact.inline.trigger.strategy",
        serialization_alias="hoodie.compact.inline.trigger.strategy",
    )
    max_delta_commits: int = Field(
        default=5,
        ge=0,
        le=MAX_COUNT,
        validation_alias="hoodie.compact.inline.max.delta.commits",
        serialization_alias="hoodie.compact.inline.max.delta.commits",
    )
    max_delta_seconds: int = Field(
        default=3600,
        ge=0,
        le=MAX_SECONDS,
        validation_alias="hoodie.compact.inline.max.delta.seconds",
        serialization_alias="hoodie.compact.inline.max.delta.seconds",
    )
    strategy: CompactionStrategyName = Field(
        default=CompactionStrategyName.LOG_FILE_SIZE_BASED,
        validation_alias="hoodie.compaction.strategy",
        serialization_alias="hoodie.compaction.strategy",
    )
    target_io_mb: int = Field(
        default=500 * 1024,
        ge=0,
        le=MAX_MB,
        validation_alias="hoodie.compaction.target.io",
        serialization_alias="hoodie.compaction.target.io",
    )
    log_file_size_threshold: int = Field(
        default=0,
        ge=0,
        le=MAX_BYTES,
        validation_alias="hoodie.compaction.logfile.size.threshold",
        serialization_alias="hoodie.compaction.logfile.size.threshold",
    )
    day_based_target_partitions: int = Field(
        default=10,
        ge=1,
        le=MAX_COUNT,
        validation_alias="hoodie.compaction.daybased.target.partitions",
        serialization_alias="hoodie.compaction.daybased.target.partitions",
    )
    parquet_max_file_size: int = Field(
        default=DEFAULT_PARQUET_MAX_FILE_SIZE,
        ge=1,
        le=MAX_BYTES,
        validation_alias="hoodie.parquet.max.file.size",
        serialization_alias="hoodie.parquet.max.file.size",
    )
    log_bytes_threshold: int | None = Field(
        default=None,
        ge=1,
        le=MAX_BYTES,
        validation_alias="tableservice.compaction.log.bytes.threshold",
        serialization_alias="tableservice.compaction.log.bytes.threshold",
    )

    memory_max_size: int | None = Field(
        default=None,
        ge=1,
        le=MAX_BYTES,
        validation_alias="hoodie.memory.compaction.max.size",
        serialization_alias="hoodie.memory.compaction.max.size",
    )
    memory_fraction: float = Field(
        default=0.6,
        gt=0,
        le=1,
        allow_inf_nan=False,
        validation_alias="hoodie.memory.compaction.fraction",
        serialization_alias="hoodie.memory.compaction.fraction",
    )

    @field_validator("trigger_strategy", mode="before")
    @classmethod
    def _trigger(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("strategy", mode="before")
    @classmethod
    def _strategy(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        text = value.strip()
        if "," in text:
            raise ValueError("composite compaction strategies (a comma-separated list) are not supported")
        for name in CompactionStrategyName:
            if text in (name.value, name.short_name) or text.lower() == name.short_name.lower():
                return name
        known = ", ".join(n.short_name for n in CompactionStrategyName)
        raise ValueError(f"unknown compaction strategy; expected one of {known} (or their full class names)")

    @field_validator("log_bytes_threshold", mode="before")
    @classmethod
    def _off(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in ("", "off", "none", "-1"):
            return None
        return value
