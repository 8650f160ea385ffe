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
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tableservice.errors import ConfigError

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


class CompactionPolicy(BaseModel):
    """Frozen; build it with Hudi's keys (`CompactionPolicy.from_mapping({...})`, `model_validate`) or with the
    attribute names as keywords. Invalid values raise a pydantic ValidationError (direct construction) or a ConfigError
    (`from_mapping`), both naming the key and the value."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

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
        validation_alias="hoodie.compact.inline.max.delta.commits",
        serialization_alias="hoodie.compact.inline.max.delta.commits",
    )
    max_delta_seconds: int = Field(
        default=3600,
        ge=0,
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
        validation_alias="hoodie.compaction.target.io",
        serialization_alias="hoodie.compaction.target.io",
    )
    log_file_size_threshold: int = Field(
        default=0,
        ge=0,
        validation_alias="hoodie.compaction.logfile.size.threshold",
        serialization_alias="hoodie.compaction.logfile.size.threshold",
    )
    day_based_target_partitions: int = Field(
        default=10,
        ge=1,
        validation_alias="hoodie.compaction.daybased.target.partitions",
        serialization_alias="hoodie.compaction.daybased.target.partitions",
    )
    parquet_max_file_size: int = Field(
        default=DEFAULT_PARQUET_MAX_FILE_SIZE,
        ge=1,
        validation_alias="hoodie.parquet.max.file.size",
        serialization_alias="hoodie.parquet.max.file.size",
    )
    log_bytes_threshold: int | None = Field(
        default=None,
        ge=1,
        validation_alias="tableservice.compaction.log.bytes.threshold",
        serialization_alias="tableservice.compaction.log.bytes.threshold",
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

    # --- building from configuration ------------------------------------------------------------

    @classmethod
    def keys(cls) -> dict[str, str]:
        """Hudi key → attribute name."""
        return {str(info.serialization_alias or name): name for name, info in cls.model_fields.items()}

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, strict: bool = False) -> Self:
        """A policy from a configuration mapping (values may be strings, as in a properties file). Keys this
        model does not know are ignored, except with `strict=True` for keys under `hoodie.compact.`,
        `hoodie.compaction.` and `tableservice.compaction.` (likely typos)."""
        keys = cls.keys()
        data: dict[str, Any] = {}
        for key, value in values.items():
            if key in keys or key in keys.values():
                data[key] = value
            elif strict and key.startswith(_OWN_PREFIXES):
                raise ConfigError(f"unknown compaction setting {key}={value!r}")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            problems = []
            for err in e.errors():
                key = str(err["loc"][0]) if err["loc"] else "?"
                problems.append(f"{key}={err.get('input')!r}: {err['msg']}")
            raise ConfigError("invalid compaction policy: " + "; ".join(problems)) from e

    def to_mapping(self) -> dict[str, str]:
        """The policy as Hudi-keyed strings (the log-bytes key only when set)."""
        out: dict[str, str] = {}
        for key, value in self.model_dump(by_alias=True).items():
            if value is None:
                continue
            out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out
