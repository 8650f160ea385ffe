"""A realistic, reproducible ingestion workload for trying the daemon, tests and benchmarks.

Trips keyed by `uuid`, partitioned by `city`, ordered by the event time `ts` (epoch milliseconds). The first
operation inserts every record; each later one is an upsert that updates a fraction of the live records and
deletes another fraction (in one commit, as a Hudi upsert carrying `_hoodie_is_deleted` records does). A share
of updates arrive late: their event time is older than the version already stored, so under event-time ordering
they must lose against it, and under commit-time ordering they win.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

CITIES = ("san_francisco", "sao_paulo", "chennai", "amsterdam", "lagos", "osaka", "lima", "oslo")
RIDERS = tuple(f"rider-{c}" for c in "ABCDEFGHIJKLMNOP")
DRIVERS = tuple(f"driver-{c}" for c in "KLMNOPQRSTUVWXYZ")

TRIP_SCHEMA = pa.schema(
    [
        pa.field("uuid", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("rider", pa.string()),
        pa.field("driver", pa.string()),
        pa.field("fare", pa.float64()),
        pa.field("tip", pa.decimal128(10, 2)),
        pa.field("passengers", pa.int32()),
        pa.field("trip_date", pa.date32()),
        pa.field("is_paid", pa.bool_()),
        pa.field("city", pa.string()),
    ]
)
RECORD_KEY = "uuid"
ORDERING_FIELD = "ts"
PARTITION_FIELD = "city"
BASE_TS = 1_700_000_000_000  # 2023-11-14, epoch millis


class Operation(enum.StrEnum):
    INSERT = "insert"
    UPSERT = "upsert"
    DELETE = "delete"
    INSERT_OVERWRITE = "insert_overwrite"


@dataclass(frozen=True)
class WorkloadStep:
    operation: Operation
    records: pa.Table  # full rows to write (may be empty)
    deletes: pa.Table | None = None  # key, partition and ordering columns of records to delete


@dataclass(frozen=True)
class Workload:
    records: int
    commits: int
    update_fraction: float = 0.2
    delete_fraction: float = 0.0
    partitions: int = 3
    late_fraction: float = 0.1
    seed: int = 7

    def steps(self) -> Iterator[WorkloadStep]:
        """The operations in order. Each later step touches distinct live keys."""
        if self.records <= 0 or self.commits <= 0:
            return
        rng = np.random.default_rng(self.seed)
        n = self.records
        parts = max(1, min(self.partitions, len(CITIES)))
        keys = np.char.add(np.char.zfill(np.arange(n).astype("U12"), 12), f"-{self.seed:04d}").astype(object)
        city_idx = rng.integers(0, parts, n) if self.partitions > 0 else np.zeros(n, dtype=np.int64)
        ts = BASE_TS + rng.integers(0, 3_600_000, n)
        live = np.ones(n, dtype=bool)
        yield WorkloadStep(Operation.INSERT, self._rows(rng, keys, city_idx, ts))
        for step in range(1, self.commits):
            alive = np.flatnonzero(live)
            n_upd = min(len(alive), round(self.update_fraction * n))
            n_del = min(len(alive) - n_upd, round(self.delete_fraction * n))
            chosen = rng.choice(alive, size=n_upd + n_del, replace=False) if n_upd + n_del else alive[:0]
            upd, dels = np.sort(chosen[:n_upd]), np.sort(chosen[n_upd:])
            if len(upd):
                late = rng.random(len(upd)) < self.late_fraction
                delta = rng.integers(1, 600_000, len(upd))
                new_ts = np.where(late, ts[upd] - delta, ts[upd] + delta + step * 3_600_000)
                # A late update loses under event-time ordering: the stored ts stays the maximum.
                ts[upd] = np.maximum(ts[upd], new_ts)
            else:
                new_ts = ts[upd]
            deletes = None
            if len(dels):
                live[dels] = False
                deletes = self._keys(keys[dels], city_idx[dels], ts[dels] + 1)
            yield WorkloadStep(Operation.UPSERT, self._rows(rng, keys[upd], city_idx[upd], new_ts), deletes)

    def _partition_values(self, city_idx: np.ndarray) -> pa.Array:
        if self.partitions <= 0:
            return pa.array([CITIES[0]] * len(city_idx), pa.string())
        return pa.array(np.array(CITIES, dtype=object)[city_idx], pa.string())

    def _rows(self, rng: np.random.Generator, keys: np.ndarray, city_idx: np.ndarray, ts: np.ndarray) -> pa.Table:
        m = len(keys)
        fare = np.round(rng.uniform(3, 120, m), 2)
        tips = pa.array(rng.integers(0, 2500, m) / 100.0).cast(pa.decimal128(10, 2))
        return pa.table(
            {
                "uuid": pa.array(keys, pa.string()),
                "ts": pa.array(ts, pa.int64()),
                "rider": pa.array(np.array(RIDERS, dtype=object)[rng.integers(0, len(RIDERS), m)], pa.string()),
                "driver": pa.array(np.array(DRIVERS, dtype=object)[rng.integers(0, len(DRIVERS), m)], pa.string()),
                "fare": pa.array(fare, pa.float64()),
                "tip": tips,
                "passengers": pa.array(rng.integers(1, 5, m), pa.int32()),
                "trip_date": pa.array((ts // 86_400_000).astype(np.int32), pa.date32()),
                "is_paid": pa.array(rng.random(m) < 0.9, pa.bool_()),
                "city": self._partition_values(city_idx),
            },
            schema=TRIP_SCHEMA,
        )

    def _keys(self, keys: np.ndarray, city_idx: np.ndarray, ts: np.ndarray) -> pa.Table:
        return pa.table(
            {
                "uuid": pa.array(keys, pa.string()),
                "ts": pa.array(ts, pa.int64()),
                "city": self._partition_values(city_idx),
            }
        )


@dataclass(frozen=True)
class FollowUp:
    """More commits for a table a `Workload` made: updates and deletes of its live keys (read from the table), new
    inserts with fresh keys. For drills and demos on an existing table (`tableservice write`)."""

    commits: int
    update_fraction: float = 0.2
    delete_fraction: float = 0.0
    inserts: int = 0  # new records per commit
    late_fraction: float = 0.1
    seed: int = 11

    def steps(self, live: pa.Table) -> Iterator[WorkloadStep]:
        """`live`: the table's current `uuid`, `ts` and `city` columns. Each step touches distinct live keys."""
        rng = np.random.default_rng(self.seed)
        keys = np.array(live.column(RECORD_KEY).to_pylist(), dtype=object)
        cities = live.column(PARTITION_FIELD).to_pylist()
        unknown = sorted({c for c in cities if c not in CITIES})
        if unknown:
            raise ValueError(f"city values {unknown[:3]} were not made by the generator")
        city_idx = np.array([CITIES.index(c) for c in cities], dtype=np.int64)
        ts = np.array(live.column(ORDERING_FIELD).to_pylist(), dtype=np.int64)
        shape = Workload(max(1, len(keys)), 1, partitions=len(CITIES), seed=self.seed)
        alive = np.ones(len(keys), dtype=bool)
        n = len(keys)
        for step in range(self.commits):
            candidates = np.flatnonzero(alive)
            n_upd = min(len(candidates), round(self.update_fraction * n))
            n_del = min(len(candidates) - n_upd, round(self.delete_fraction * n))
            chosen = rng.choice(candidates, size=n_upd + n_del, replace=False) if n_upd + n_del else candidates[:0]
            upd, dels = np.sort(chosen[:n_upd]), np.sort(chosen[n_upd:])
            late = rng.random(len(upd)) < self.late_fraction
            delta = rng.integers(1, 600_000, len(upd))
            new_ts = np.where(late, ts[upd] - delta, ts[upd] + delta + (step + 1) * 3_600_000)
            ts[upd] = np.maximum(ts[upd], new_ts)
            rows = shape._rows(rng, keys[upd], city_idx[upd], new_ts)
            if self.inserts:
                fresh = np.char.add(
                    np.char.zfill(np.arange(self.inserts).astype("U12"), 12), f"-{self.seed:04d}-{step:04d}"
                ).astype(object)
                fresh_city = (
                    city_idx[rng.integers(0, len(city_idx), self.inserts)]
                    if n
                    else np.zeros(self.inserts, dtype=np.int64)
                )
                fresh_ts = BASE_TS + (step + 1) * 3_600_000 + rng.integers(0, 3_600_000, self.inserts)
                rows = pa.concat_tables([rows, shape._rows(rng, fresh, fresh_city, fresh_ts)])
            deletes = None
            if len(dels):
                alive[dels] = False
                deletes = shape._keys(keys[dels], city_idx[dels], ts[dels] + 1)
            yield WorkloadStep(Operation.UPSERT, rows, deletes)
