"""The clustering policy of one table: when to schedule a clustering and which file slices a plan takes.

Keys and defaults are Hudi's (`HoodieClusteringConfig`, `HoodieWriteConfig`, `HoodieStorageConfig`, Hudi 1.x),
so a writer's configuration can be copied over as it is; `tableservice.clustering.*` keys are this project's own:

- `tableservice.clustering.enabled` (false, like Hudi's `hoodie.clustering.async.enabled`): schedule when due.
- `hoodie.clustering.async.max.commits` / `hoodie.clustering.inline.max.commits` (4): completed commits since
  the last clustering that make a clustering due. An explicitly set async key wins over an explicitly set
  inline key (this service runs asynchronously to the writers).
- `hoodie.clustering.plan.strategy.small.file.limit` (314572800 = 300 MB; Hudi before 0.14 used 600 MB): only
  slices whose base file is smaller are clustered.
- `hoodie.clustering.plan.strategy.max.bytes.per.group` (2 GiB), `...max.num.groups` (30),
  `...target.file.max.bytes` (1 GiB): group size cap, group count cap, output file size.
- `hoodie.clustering.plan.strategy.sort.columns` (none): comma list, written into the plan's strategy params.
- `hoodie.layout.optimize.strategy` (linear): linear or z-order (hilbert is refused).
- `hoodie.clustering.plan.strategy.single.group.clustering.enabled` (true): keep a partition's last group when
  it holds a single slice.
- Partitions: `hoodie.clustering.plan.strategy.partition.selected` (comma list, bypasses the listing),
  `...partition.regex.pattern` (full match), `hoodie.clustering.plan.partition.filter.mode` NONE or
  SELECTED_PARTITIONS (with `...cluster.begin.partition` / `...cluster.end.partition`, inclusive); RECENT_DAYS
  and DAY_ROLLING are refused (their `daybased.*` keys are accepted and unused).
- `hoodie.clustering.plan.strategy.class` (SparkSizeBasedClusteringPlanStrategy) and
  `hoodie.clustering.execution.strategy.class` (SparkSortAndSizeExecutionStrategy): the only ones supported.
- `hoodie.table.services.incremental.enabled` (true; table versions 8 and 9): plan only partitions written
  since the last completed clustering, and record partitions left over in `missingSchedulePartitions`.
- `hoodie.parquet.max.file.size` (125829120): the size assumed for a slice without base file.
"""

from __future__ import annotations

import enum
import re
from typing import Any, ClassVar

from pydantic import Field, field_validator

from tableservice.planning.keyed_policy import MAX_BYTES, MAX_COUNT, HudiKeyedPolicy

MB = 1024 * 1024
GB = 1024 * MB
SORT_COLUMNS_KEY = "hoodie.clustering.plan.strategy.sort.columns"
SPARK_SIZE_BASED_PLAN_STRATEGY = "org.apache.hudi.client.clustering.plan.strategy.SparkSizeBasedClusteringPlanStrategy"
SPARK_SORT_AND_SIZE_EXECUTION_STRATEGY = (
    "org.apache.hudi.client.clustering.run.strategy.SparkSortAndSizeExecutionStrategy"
)
_OWN_PREFIXES = ("hoodie.clustering.", "hoodie.layout.optimize.", "tableservice.clustering.")

# Hudi clustering keys that do not change what a plan holds (execution, parallelism, writer-side switches):
# accepted and ignored, so that a writer's configuration passes `strict` checks.
IGNORED_HUDI_KEYS = frozenset(
    {
        "hoodie.clustering.inline",
        "hoodie.clustering.async.enabled",
        "hoodie.clustering.schedule.inline",
        "hoodie.clustering.updates.strategy",
        "hoodie.clustering.max.parallelism",
        "hoodie.clustering.group.read.parallelism",
        "hoodie.clustering.rollback.pending.replacecommit.on.conflict",
        "hoodie.clustering.plan.strategy.binary.copy.schema.evolution.enable",
        "hoodie.clustering.preserve.commit.metadata",
        "hoodie.layout.optimize.enable",
        "hoodie.layout.optimize.curve.build.method",
        "hoodie.layout.optimize.build.curve.sample.size",
        "hoodie.layout.optimize.data.skipping.enable",
    }
)


class ClusteringPartitionFilterMode(enum.StrEnum):
    """Hudi's `ClusteringPlanPartitionFilterMode`."""

    NONE = "NONE"
    RECENT_DAYS = "RECENT_DAYS"
    SELECTED_PARTITIONS = "SELECTED_PARTITIONS"
    DAY_ROLLING = "DAY_ROLLING"


class LayoutOptimizationStrategy(enum.StrEnum):
    """How the executor orders rows (the values `tableservice.hudi.action.cluster.sort_rows` takes)."""

    LINEAR = "linear"
    Z_ORDER = "z-order"


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _class_name(value: Any, expected: str, what: str) -> Any:
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text in (expected, _short(expected)) or text.lower() == _short(expected).lower():
        return expected
    raise ValueError(f"{what} {text!r} is not supported; expected {_short(expected)} (or {expected})")


def _comma_list(value: Any) -> Any:
    """A comma list normalised to `a,b` (names stripped, empty entries dropped); None when empty."""
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        return value
    names = [n.strip() for n in value.split(",") if n.strip()]
    return ",".join(names) if names else None


class ClusteringPolicy(HudiKeyedPolicy):
    """Frozen; build it with Hudi's keys (`ClusteringPolicy.from_mapping({...})`, `model_validate`) or with the
    attribute names as keywords. Invalid values raise a pydantic ValidationError (direct construction) or a
    ConfigError (`from_mapping`), both naming the key and the value."""

    service_name: ClassVar[str] = "clustering"
    own_prefixes: ClassVar[tuple[str, ...]] = _OWN_PREFIXES
    ignored_own_keys: ClassVar[frozenset[str]] = IGNORED_HUDI_KEYS

    enabled: bool = Field(
        default=False,
        validation_alias="tableservice.clustering.enabled",
        serialization_alias="tableservice.clustering.enabled",
    )
    inline_max_commits: int = Field(
        default=4,
        ge=0,
        le=MAX_COUNT,
        validation_alias="hoodie.clustering.inline.max.commits",
        serialization_alias="hoodie.clustering.inline.max.commits",
    )
    async_max_commits: int = Field(
        default=4,
        ge=0,
        le=MAX_COUNT,
        validation_alias="hoodie.clustering.async.max.commits",
        serialization_alias="hoodie.clustering.async.max.commits",
    )
    small_file_limit: int = Field(
        default=300 * MB,
        ge=0,
        le=MAX_BYTES,
        validation_alias="hoodie.clustering.plan.strategy.small.file.limit",
        serialization_alias="hoodie.clustering.plan.strategy.small.file.limit",
    )
    max_bytes_per_group: int = Field(
        default=2 * GB,
        ge=1,
        le=MAX_BYTES,
        validation_alias="hoodie.clustering.plan.strategy.max.bytes.per.group",
        serialization_alias="hoodie.clustering.plan.strategy.max.bytes.per.group",
    )
    max_num_groups: int = Field(
        default=30,
        ge=1,
        le=MAX_COUNT,
        validation_alias="hoodie.clustering.plan.strategy.max.num.groups",
        serialization_alias="hoodie.clustering.plan.strategy.max.num.groups",
    )
    target_file_max_bytes: int = Field(
        default=1 * GB,
        ge=1,
        le=MAX_BYTES,
        validation_alias="hoodie.clustering.plan.strategy.target.file.max.bytes",
        serialization_alias="hoodie.clustering.plan.strategy.target.file.max.bytes",
    )
    sort_columns: str | None = Field(
        default=None,
        validation_alias=SORT_COLUMNS_KEY,
        serialization_alias=SORT_COLUMNS_KEY,
    )
    layout_strategy: LayoutOptimizationStrategy = Field(
        default=LayoutOptimizationStrategy.LINEAR,
        validation_alias="hoodie.layout.optimize.strategy",
        serialization_alias="hoodie.layout.optimize.strategy",
    )
    single_group_clustering_enabled: bool = Field(
        default=True,
        validation_alias="hoodie.clustering.plan.strategy.single.group.clustering.enabled",
        serialization_alias="hoodie.clustering.plan.strategy.single.group.clustering.enabled",
    )
    partition_filter_mode: ClusteringPartitionFilterMode = Field(
        default=ClusteringPartitionFilterMode.NONE,
        validation_alias="hoodie.clustering.plan.partition.filter.mode",
        serialization_alias="hoodie.clustering.plan.partition.filter.mode",
    )
    partition_selected: str | None = Field(
        default=None,
        validation_alias="hoodie.clustering.plan.strategy.partition.selected",
        serialization_alias="hoodie.clustering.plan.strategy.partition.selected",
    )
    partition_regex_pattern: str | None = Field(
        default=None,
        validation_alias="hoodie.clustering.plan.strategy.partition.regex.pattern",
        serialization_alias="hoodie.clustering.plan.strategy.partition.regex.pattern",
    )
    begin_partition: str | None = Field(
        default=None,
        validation_alias="hoodie.clustering.plan.strategy.cluster.begin.partition",
        serialization_alias="hoodie.clustering.plan.strategy.cluster.begin.partition",
    )
    end_partition: str | None = Field(
        default=None,
        validation_alias="hoodie.clustering.plan.strategy.cluster.end.partition",
        serialization_alias="hoodie.clustering.plan.strategy.cluster.end.partition",
    )
    daybased_lookback_partitions: int = Field(
        default=2,
        le=MAX_COUNT,
        validation_alias="hoodie.clustering.plan.strategy.daybased.lookback.partitions",
        serialization_alias="hoodie.clustering.plan.strategy.daybased.lookback.partitions",
    )
    daybased_skip_from_latest_partitions: int = Field(
        default=0,
        le=MAX_COUNT,
        validation_alias="hoodie.clustering.plan.strategy.daybased.skipfromlatest.partitions",
        serialization_alias="hoodie.clustering.plan.strategy.daybased.skipfromlatest.partitions",
    )
    plan_strategy_class: str = Field(
        default=SPARK_SIZE_BASED_PLAN_STRATEGY,
        validation_alias="hoodie.clustering.plan.strategy.class",
        serialization_alias="hoodie.clustering.plan.strategy.class",
    )
    execution_strategy_class: str = Field(
        default=SPARK_SORT_AND_SIZE_EXECUTION_STRATEGY,
        validation_alias="hoodie.clustering.execution.strategy.class",
        serialization_alias="hoodie.clustering.execution.strategy.class",
    )
    incremental: bool = Field(
        default=True,
        validation_alias="hoodie.table.services.incremental.enabled",
        serialization_alias="hoodie.table.services.incremental.enabled",
    )
    parquet_max_file_size: int = Field(
        default=120 * MB,
        ge=1,
        le=MAX_BYTES,
        validation_alias="hoodie.parquet.max.file.size",
        serialization_alias="hoodie.parquet.max.file.size",
    )

    # --- value checks ---------------------------------------------------------------------------------------

    @field_validator("sort_columns", "partition_selected", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _comma_list(value)

    @field_validator("partition_regex_pattern", "begin_partition", "end_partition", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("partition_regex_pattern")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as e:
                raise ValueError(f"not a regular expression: {e}") from e
        return value

    @field_validator("layout_strategy", mode="before")
    @classmethod
    def _layout(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        text = value.strip().lower()
        if text in ("z-order", "zorder"):
            return LayoutOptimizationStrategy.Z_ORDER
        if text == "linear":
            return LayoutOptimizationStrategy.LINEAR
        if text == "hilbert":
            raise ValueError("the hilbert layout is not supported; use linear or z-order")
        raise ValueError("unknown layout optimization strategy; expected linear or z-order")

    @field_validator("partition_filter_mode", mode="before")
    @classmethod
    def _mode(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        text = value.strip().upper()
        if text in (ClusteringPartitionFilterMode.RECENT_DAYS, ClusteringPartitionFilterMode.DAY_ROLLING):
            raise ValueError(f"partition filter mode {text} is not supported; use NONE or SELECTED_PARTITIONS")
        return text

    @field_validator("partition_filter_mode")
    @classmethod
    def _mode_supported(cls, value: ClusteringPartitionFilterMode) -> ClusteringPartitionFilterMode:
        if value not in (ClusteringPartitionFilterMode.NONE, ClusteringPartitionFilterMode.SELECTED_PARTITIONS):
            raise ValueError(f"partition filter mode {value.value} is not supported; use NONE or SELECTED_PARTITIONS")
        return value

    @field_validator("plan_strategy_class", mode="before")
    @classmethod
    def _plan_class(cls, value: Any) -> Any:
        return _class_name(value, SPARK_SIZE_BASED_PLAN_STRATEGY, "clustering plan strategy")

    @field_validator("execution_strategy_class", mode="before")
    @classmethod
    def _execution_class(cls, value: Any) -> Any:
        return _class_name(value, SPARK_SORT_AND_SIZE_EXECUTION_STRATEGY, "clustering execution strategy")

    # --- derived values -----------------------------------------------------------------------------------

    @property
    def sort_column_names(self) -> tuple[str, ...]:
        return tuple(self.sort_columns.split(",")) if self.sort_columns else ()

    @property
    def selected_partitions(self) -> tuple[str, ...]:
        return tuple(self.partition_selected.split(",")) if self.partition_selected else ()

    @property
    def keeps_single_slice_groups(self) -> bool:
        """Hudi's `shouldClusteringSingleGroup`: sort columns set, or single-group clustering enabled."""
        return bool(self.sort_columns) or self.single_group_clustering_enabled

    @property
    def max_commits(self) -> int:
        """Commits since the last clustering that make one due: the async key when set, else the inline key
        when set, else 4."""
        if "async_max_commits" in self.model_fields_set or "inline_max_commits" not in self.model_fields_set:
            return self.async_max_commits
        return self.inline_max_commits

    # --- building from configuration ------------------------------------------------------------------
