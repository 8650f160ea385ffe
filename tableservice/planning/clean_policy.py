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
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tableservice.errors import ConfigError


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


def _key(name: str) -> Any:
    return Field(validation_alias=name, serialization_alias=name)


class CleanPolicy(BaseModel):
    """Frozen; build it with Hudi's keys (`CleanPolicy.from_mapping({...})`, `model_validate`) or with the attribute
    names as keywords. Invalid values raise a pydantic ValidationError (direct construction) or a ConfigError
    (`from_mapping`), both naming the key and the value."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

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
        validation_alias="hoodie.cleaner.commits.retained",
        serialization_alias="hoodie.cleaner.commits.retained",
    )
    hours_retained: int = Field(
        default=24,
        ge=0,
        validation_alias="hoodie.cleaner.hours.retained",
        serialization_alias="hoodie.cleaner.hours.retained",
    )
    file_versions_retained: int = Field(
        default=3,
        ge=1,
        validation_alias="hoodie.cleaner.fileversions.retained",
        serialization_alias="hoodie.cleaner.fileversions.retained",
    )
    max_commits: int = Field(
        default=1,
        ge=0,
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

    # --- building from configuration ------------------------------------------------------------

    @classmethod
    def keys(cls) -> dict[str, str]:
        """Hudi key → attribute name."""
        return {str(info.serialization_alias or name): name for name, info in cls.model_fields.items()}

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, strict: bool = False) -> Self:
        """A policy from a configuration mapping (values may be strings, as in a properties file). Keys this model
        does not know are ignored, except with `strict=True` for keys under `hoodie.clean.`, `hoodie.cleaner.` and
        `tableservice.clean.` that Hudi does not know either (likely typos)."""
        keys = cls.keys()
        data: dict[str, Any] = {}
        for raw_key, value in values.items():
            key = _ALIASES.get(raw_key, raw_key)
            if key in keys or key in keys.values():
                data[key] = value
            elif strict and key.startswith(_OWN_PREFIXES) and key not in _WRITER_KEYS:
                raise ConfigError(f"unknown clean setting {raw_key}={value!r}")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            problems = []
            for err in e.errors():
                key = str(err["loc"][0]) if err["loc"] else "?"
                problems.append(f"{key}={err.get('input')!r}: {err['msg']}")
            raise ConfigError("invalid clean policy: " + "; ".join(problems)) from e

    def to_mapping(self) -> dict[str, str]:
        """The policy as Hudi-keyed strings."""
        out: dict[str, str] = {}
        for key, value in self.model_dump(by_alias=True).items():
            out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out
