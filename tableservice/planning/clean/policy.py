"""The clean policy of one table: when a clean is due and which file slices a clean plan deletes.

Keys and defaults are Hudi's (`HoodieCleanConfig`), so a writer's configuration can be copied over as it is:

- `hoodie.cleaner.policy` (KEEP_LATEST_COMMITS): also KEEP_LATEST_FILE_VERSIONS and KEEP_LATEST_BY_HOURS.
- `hoodie.cleaner.commits.retained` (10): completed commits whose file slices stay readable (KEEP_LATEST_COMMITS).
- `hoodie.cleaner.hours.retained` (24): hours of commits whose file slices stay readable (KEEP_LATEST_BY_HOURS).
- `hoodie.cleaner.fileversions.retained` (3): file slices kept per file group (KEEP_LATEST_FILE_VERSIONS).
- `hoodie.clean.max.commits` (1): completed commits since the last clean's `lastCompletedCommitTimestamp` that
  make a clean due (trigger strategy NUM_COMMITS, `hoodie.clean.trigger.strategy`, the only one Hudi has).
- `hoodie.cleaner.incremental.mode` (true): plan only the partitions written since the previous clean.
- `hoodie.cleaner.delete.bootstrap.base.file` (false): also delete the bootstrap source file of a cleaned
  skeleton base file. Accepted for compatibility; bootstrapped tables are not cleaned by this project (no
  bootstrap base file is ever named in our plans). `hoodie.clean.delete.bootstrap.base.file` is read as the
  same key.
- `tableservice.clean.enabled` (true): this project's switch for scheduling cleans.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field, field_validator

from tableservice.planning.keyed_policy import MAX_COUNT, MAX_HOURS, HudiKeyedPolicy


class CleanerPolicyName(enum.StrEnum):
    """Hudi's `HoodieCleaningPolicy` (the ones that clean data files)."""

    KEEP_LATEST_COMMITS = "KEEP_LATEST_COMMITS"
    KEEP_LATEST_FILE_VERSIONS = "KEEP_LATEST_FILE_VERSIONS"
    KEEP_LATEST_BY_HOURS = "KEEP_LATEST_BY_HOURS"


class CleaningTriggerStrategy(enum.StrEnum):
    """Hudi's `CleaningTriggerStrategy`."""

    NUM_COMMITS = "NUM_COMMITS"


# Keys under these prefixes are clean settings: with `strict`, an unknown one is an error (a typo).
_OWN_PREFIXES = ("hoodie.clean.", "hoodie.cleaner.", "tableservice.clean.")
# Hudi clean keys that configure the writer, not the plan: accepted and ignored.
_WRITER_KEYS = frozenset(
    {
        "hoodie.clean.automatic",
        "hoodie.clean.async",
        "hoodie.clean.async.enabled",
        "hoodie.clean.allow.multiple",
        "hoodie.cleaner.parallelism",
        "hoodie.cleaner.policy.failed.writes",
        "hoodie.clean.failed.writes.policy",
        "hoodie.clean.multiple.enabled",
        "hoodie.clean.empty.commit.interval.hours",
        "hoodie.clean.optimized.with.local.engine",
    }
)
_ALIASES = {"hoodie.clean.delete.bootstrap.base.file": "hoodie.cleaner.delete.bootstrap.base.file"}


class CleanPolicy(HudiKeyedPolicy):
    """Frozen; build it with Hudi's keys (`CleanPolicy.from_mapping({...})`, `model_validate`) or with the attribute
    names as keywords. Invalid values raise a pydantic ValidationError (direct construction) or a ConfigError
    (`from_mapping`), both naming the key and the value."""

    service_name: ClassVar[str] = "clean"
    own_prefixes: ClassVar[tuple[str, ...]] = _OWN_PREFIXES
    ignored_own_keys: ClassVar[frozenset[str]] = _WRITER_KEYS
    key_aliases: ClassVar[Mapping[str, str]] = _ALIASES

    enabled: bool = Field(
        default=True, validation_alias="tableservice.clean.enabled", serialization_alias="tableservice.clean.enabled"
    )
    policy: CleanerPolicyName = Field(
        default=CleanerPolicyName.KEEP_LATEST_COMMITS,
        validation_alias="hoodie.cleaner.policy",
        serialization_alias="hoodie.cleaner.policy",
    )
    commits_retained: int = Field(
        default=10,
        ge=1,
        le=MAX_COUNT,
        validation_alias="hoodie.cleaner.commits.retained",
        serialization_alias="hoodie.cleaner.commits.retained",
    )
    hours_retained: int = Field(
        default=24,
        ge=0,
        le=MAX_HOURS,
        validation_alias="hoodie.cleaner.hours.retained",
        serialization_alias="hoodie.cleaner.hours.retained",
    )
    file_versions_retained: int = Field(
        default=3,
        ge=1,
        le=MAX_COUNT,
        validation_alias="hoodie.cleaner.fileversions.retained",
        serialization_alias="hoodie.cleaner.fileversions.retained",
    )
    max_commits: int = Field(
        default=1,
        ge=0,
        le=MAX_COUNT,
        validation_alias="hoodie.clean.max.commits",
        serialization_alias="hoodie.clean.max.commits",
    )
    trigger_strategy: CleaningTriggerStrategy = Field(
        default=CleaningTriggerStrategy.NUM_COMMITS,
        validation_alias="hoodie.clean.trigger.strategy",
        serialization_alias="hoodie.clean.trigger.strategy",
    )
    incremental_mode: bool = Field(
        default=True,
        validation_alias="hoodie.cleaner.incremental.mode",
        serialization_alias="hoodie.cleaner.incremental.mode",
    )
    delete_bootstrap_base_file: bool = Field(
        default=False,
        validation_alias="hoodie.cleaner.delete.bootstrap.base.file",
        serialization_alias="hoodie.cleaner.delete.bootstrap.base.file",
    )

    @field_validator("policy", "trigger_strategy", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value
