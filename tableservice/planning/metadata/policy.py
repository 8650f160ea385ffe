"""How the daemon maintains a table's metadata table, with Hudi's `hoodie.metadata.*` keys.

- `hoodie.metadata.compact.max.delta.commits` (10): compact the metadata table once this many delta commits
  completed since its last compaction.
- `hoodie.metadata.cleaner.commits.retained` (20): the metadata table's clean keeps the file slices the latest
  this-many delta commits need (Hudi 1.x keeps at least 20).
- `hoodie.metadata.keep.min.commits` (20), `hoodie.metadata.keep.max.commits` (30): the metadata table's active
  timeline is archived down to min once it holds more than max completed instants, never at or after the data
  table's earliest active write or pending instant.
"""

from __future__ import annotations

from typing import ClassVar, Self

from pydantic import Field, model_validator

from tableservice.planning.keyed_policy import MAX_COUNT, HudiKeyedPolicy


class MetadataPolicy(HudiKeyedPolicy):
    """Frozen; build it with Hudi's keys (`MetadataPolicy.from_mapping({...})`) or attribute names."""

    service_name: ClassVar[str] = "metadata"
    own_prefixes: ClassVar[tuple[str, ...]] = ("hoodie.metadata.",)

    compact_max_delta_commits: int = Field(
        default=10,
        ge=1,
        le=MAX_COUNT,
        validation_alias="hoodie.metadata.compact.max.delta.commits",
        serialization_alias="hoodie.metadata.compact.max.delta.commits",
    )
    cleaner_commits_retained: int = Field(
        default=20,
        ge=1,
        le=MAX_COUNT,
        validation_alias="hoodie.metadata.cleaner.commits.retained",
        serialization_alias="hoodie.metadata.cleaner.commits.retained",
    )
    keep_min_commits: int = Field(
        default=20,
        ge=1,
        le=MAX_COUNT,
        validation_alias="hoodie.metadata.keep.min.commits",
        serialization_alias="hoodie.metadata.keep.min.commits",
    )
    keep_max_commits: int = Field(
        default=30,
        ge=2,
        le=MAX_COUNT,
        validation_alias="hoodie.metadata.keep.max.commits",
        serialization_alias="hoodie.metadata.keep.max.commits",
    )

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.keep_max_commits <= self.keep_min_commits:
            raise ValueError(
                "hoodie.metadata.keep.max.commits must be greater than hoodie.metadata.keep.min.commits "
                f"({self.keep_max_commits} <= {self.keep_min_commits})"
            )
        return self
