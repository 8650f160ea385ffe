"""Which metadata-table indexes a table should have, with Hudi's `hoodie.metadata.*` keys; the daemon schedules an
`indexing` action for those the table lacks.

- `hoodie.metadata.record.index.enable` (false): the record index (`record_index`).
- `hoodie.metadata.index.column.stats.enable` (false): column stats (`column_stats`);
  `hoodie.metadata.index.column.stats.column.list` ("" = Hudi's default columns) names the indexed columns
  (recorded in `.hoodie/.index_defs/index.json`; table version 8+).
- `hoodie.metadata.index.bloom.filter.enable` (false): bloom filters of base files (`bloom_filters`).
- `hoodie.metadata.index.partition.stats.enable` (false): partition stats (`partition_stats`, version 8+).
Secondary indexes are named in the section's `secondary_indexes` (name -> column), not by a Hudi key.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from tableservice.planning.keyed_policy import HudiKeyedPolicy

FILES = "files"
COLUMN_STATS = "column_stats"
PARTITION_STATS = "partition_stats"
BLOOM_FILTERS = "bloom_filters"
RECORD_INDEX = "record_index"
SECONDARY_PREFIX = "secondary_index_"


class IndexingPolicy(HudiKeyedPolicy):
    """Frozen; build it with Hudi's keys (`IndexingPolicy.from_mapping({...})`) or attribute names."""

    service_name: ClassVar[str] = "indexing"
    own_prefixes: ClassVar[tuple[str, ...]] = ("hoodie.metadata.index.", "hoodie.metadata.record.index.")

    record_index: bool = Field(
        default=False,
        validation_alias="hoodie.metadata.record.index.enable",
        serialization_alias="hoodie.metadata.record.index.enable",
    )
    column_stats: bool = Field(
        default=False,
        validation_alias="hoodie.metadata.index.column.stats.enable",
        serialization_alias="hoodie.metadata.index.column.stats.enable",
    )
    column_stats_columns: str = Field(
        default="",
        validation_alias="hoodie.metadata.index.column.stats.column.list",
        serialization_alias="hoodie.metadata.index.column.stats.column.list",
    )
    bloom_filters: bool = Field(
        default=False,
        validation_alias="hoodie.metadata.index.bloom.filter.enable",
        serialization_alias="hoodie.metadata.index.bloom.filter.enable",
    )
    partition_stats: bool = Field(
        default=False,
        validation_alias="hoodie.metadata.index.partition.stats.enable",
        serialization_alias="hoodie.metadata.index.partition.stats.enable",
    )

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(c.strip() for c in self.column_stats_columns.split(",") if c.strip())

    def wanted(self, table_version: int, secondary: dict[str, str] | None = None) -> list[str]:
        """The metadata partitions the table should have (`files` first when any is wanted)."""
        out = [
            p
            for p, on in (
                (COLUMN_STATS, self.column_stats),
                (PARTITION_STATS, self.partition_stats and table_version >= 8),
                (BLOOM_FILTERS, self.bloom_filters),
                (RECORD_INDEX, self.record_index),
            )
            if on
        ]
        if table_version >= 8:
            out += [SECONDARY_PREFIX + name for name in sorted(secondary or {})]
        return [FILES, *out] if out else []


def missing(wanted: list[str], present: set[str]) -> list[str]:
    """The wanted partitions not built, building or planned."""
    return [p for p in wanted if p not in present]
