"""Shared pieces of the merge tests: the record layout, merge configurations and an example CUSTOM merger."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tableservice.hudi.file_group.merge import MergeConfig, MergeMode

KEY = "_hoodie_record_key"
COMMIT = MergeMode.COMMIT_TIME_ORDERING
EVENT = MergeMode.EVENT_TIME_ORDERING
SCHEMA = pa.schema([(KEY, pa.string()), ("ts", pa.int64()), ("v1", pa.string()), ("v2", pa.int64())])
ReadRows = dict[str, dict[str, Any]]


def by_key(table: pa.Table) -> ReadRows:
    return {r[KEY]: r for r in table.to_pylist()}


def cfg(mode: MergeMode = EVENT, *fields: str, **kw: Any) -> MergeConfig:
    return MergeConfig(mode, tuple(fields) if fields else ("ts",), **kw)


class CountingMerger:
    """Example CUSTOM merger: the newer version wins and `v2` accumulates (associative: a running sum)."""

    def merge(
        self,
        older: pa.Table,
        newer: pa.Table,
        older_deleted: npt.NDArray[np.bool_],
        newer_deleted: npt.NDArray[np.bool_],
        config: MergeConfig,
    ) -> tuple[pa.Table, npt.NDArray[np.bool_]]:
        total = pc.add(pc.fill_null(older.column("v2"), 0), pc.fill_null(newer.column("v2"), 0))
        total = pc.if_else(pa.array(older_deleted), newer.column("v2"), total)
        return newer.set_column(newer.schema.get_field_index("v2"), "v2", total), newer_deleted.copy()


COUNTING_MERGER_ID = "6a1c9b7e-0000-4000-8000-000000000001"
