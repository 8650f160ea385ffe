"""A plain Python model of what a Hudi table holds after a sequence of writes."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

Row = dict[str, Any]


class TableModel:
    def __init__(self, key: str, partition: str | None, ordering: str | None, event_time: bool) -> None:
        self.key = key
        self.partition = partition
        self.ordering = ordering
        self.event_time = event_time
        self.rows: dict[tuple[Any, Any], Row] = {}

    def _id(self, row: Row) -> tuple[Any, Any]:
        return (row[self.partition] if self.partition else None, row[self.key])

    def _wins(self, new: Row, old: Row | None) -> bool:
        if old is None or not self.event_time or self.ordering is None:
            return True
        return bool(new[self.ordering] >= old[self.ordering])

    def upsert(self, records: pa.Table) -> None:
        for row in records.to_pylist():
            rid = self._id(row)
            if self._wins(row, self.rows.get(rid)):
                self.rows[rid] = row

    def delete(self, keys: pa.Table) -> None:
        for row in keys.to_pylist():
            rid = self._id(row)
            old = self.rows.get(rid)
            if old is not None and self._wins(row, old):
                del self.rows[rid]

    def insert_overwrite(self, records: pa.Table) -> None:
        touched = {self._id(r)[0] for r in records.to_pylist()}
        self.rows = {rid: r for rid, r in self.rows.items() if rid[0] not in touched}
        self.upsert(records)

    def snapshot(self, columns: list[str]) -> list[Row]:
        out = [{c: r[c] for c in columns} for r in self.rows.values()]
        return sorted(out, key=lambda r: (str(r.get(self.partition)) if self.partition else "", r[self.key]))


def table_rows(table: pa.Table, columns: list[str], key: str, partition: str | None) -> list[Row]:
    rows = table.select(columns).to_pylist()
    return sorted(rows, key=lambda r: (str(r.get(partition)) if partition else "", r[key]))
