"""SLO ordering against oldest-first on a fleet: breaches side by side (python -m bench.slo).

N small merge-on-read tables are written on local disk with the write client; their real timelines seed a
discrete-event simulation on a virtual clock (no Spark, no sleeping): delta commits arrive at each table
(exponential gaps, seeded), compaction is due after `--delta-commits` of them, and a free slot (`--capacity`,
the daemon's `max_concurrent_actions`) goes to the waiting table the ordering picks. Action durations are drawn
from a fixed log-normal distribution per table (seeded; the same draws in both runs). The ordering is the real
code: `planning.slo.readings` on the table's timeline, `risk_key` with the expected duration from the table's
simulated history (mean of its last completed compactions) for SLO ordering, the oldest waiting work for
oldest-first. Half the tables have a tight `max_uncompacted_log_age_seconds`, the others a loose one. Breaches
(transitions into breach) and seconds in breach are read from the same `readings` on a fixed grid.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.common import standard_mor_table
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.active import Timeline
from tableservice.hudi.timeline.instant import Action, Instant, State, format_instant_time, timeline_timezone
from tableservice.planning.slo import DueWork, SloTargets, expected_duration, readings, risk_key
from tableservice.storage import Storage

GRID_SECONDS = 10.0


@dataclass
class SimTable:
    name: str
    tight: bool
    targets: SloTargets
    instants: list[Instant]
    layout: int
    tz_name: str
    arrival_gap: float  # mean seconds between delta commits
    durations: list[float]  # this table's action durations, drawn once, used in order
    history: list[float] = field(default_factory=list)  # completed durations, newest first
    waiting_since: float | None = None
    running: bool = False
    next_duration: int = 0
    breaches: int = 0
    breached: bool = False
    seconds_in_breach: float = 0.0

    def timeline(self) -> Timeline:
        return Timeline(tuple(sorted(self.instants)), self.layout)

    def deltas_since_compaction(self) -> int:
        last = max((i.requested_time for i in self.instants if i.action is Action.COMPACTION), default="")
        return sum(1 for i in self.instants if i.action is Action.DELTA_COMMIT and i.requested_time > last)


def _instant_time(epoch: float, tz_name: str) -> str:
    return format_instant_time(datetime.fromtimestamp(epoch, UTC), timeline_timezone(tz_name))


def write_tables(root: Path, count: int) -> list[HudiTable]:
    storage = Storage()
    tables = []
    for i in range(count):
        path = standard_mor_table(
            root / f"t{i:03d}", records=40, file_groups=1, commits=2, update_fraction=0.5, reuse=True
        )
        tables.append(HudiTable.open(storage, str(path)))
    return tables


def _fleet(tables: list[HudiTable], args: argparse.Namespace, seed: int) -> list[SimTable]:
    rng = random.Random(seed)
    fleet = []
    for i, table in enumerate(tables):
        snapshot = table.refresh()
        tight = i % 2 == 0
        limit = args.tight_seconds if tight else args.loose_seconds
        sigma = 0.6
        mu = math.log(args.mean_duration) - sigma * sigma / 2
        fleet.append(
            SimTable(
                name=f"t{i:03d}",
                tight=tight,
                targets=SloTargets(max_uncompacted_log_age_seconds=limit),
                instants=list(snapshot.timeline),
                layout=snapshot.timeline.layout_version,
                tz_name=snapshot.config.timezone_name,
                arrival_gap=rng.uniform(0.5, 1.5) * args.arrival_seconds,
                durations=[rng.lognormvariate(mu, sigma) for _ in range(10_000)],
            )
        )
    return fleet


def _key_slo(table: SimTable, now: float) -> tuple[float, str]:
    found = readings(table.timeline(), table.targets, is_mor=True, tz=timeline_timezone(table.tz_name), now=now)
    assert table.waiting_since is not None
    work = DueWork(table.name, found, frozenset({"compaction"}), _instant_time(table.waiting_since, table.tz_name))
    return risk_key(work, {"compaction": expected_duration(table.history)}, now=now)


def _key_oldest(table: SimTable, now: float) -> tuple[float, str]:
    assert table.waiting_since is not None
    return (math.inf, _instant_time(table.waiting_since, table.tz_name))


def simulate(
    fleet: list[SimTable],
    order: Callable[[SimTable, float], tuple[float, str]],
    *,
    start: float,
    horizon: float,
    capacity: int,
    delta_commits: int,
    seed: int,
) -> dict[str, float]:
    rng = random.Random(seed)  # the same arrivals for both orderings
    events: list[tuple[float, int, str, int]] = []  # (time, seq, kind, table index)
    seq = 0
    for index, table in enumerate(fleet):
        events.append((start + rng.expovariate(1 / table.arrival_gap), seq, "write", index))
        seq += 1
    events.append((start + GRID_SECONDS, seq, "grid", -1))
    heapq.heapify(events)
    in_use = 0
    tz = {t.tz_name: timeline_timezone(t.tz_name) for t in fleet}
    end = start + horizon
    arrivals = random.Random(seed + 1)
    while events:
        now, _, kind, index = heapq.heappop(events)
        if now > end:
            break
        if kind == "grid":
            for table in fleet:
                (reading,) = readings(table.timeline(), table.targets, is_mor=True, tz=tz[table.tz_name], now=now)
                if reading.breached:
                    table.seconds_in_breach += GRID_SECONDS
                    if not table.breached:
                        table.breaches += 1
                table.breached = reading.breached
            seq += 1
            heapq.heappush(events, (now + GRID_SECONDS, seq, "grid", -1))
            continue
        table = fleet[index]
        if kind == "write":
            table.instants.append(Instant(_instant_time(now, table.tz_name), Action.DELTA_COMMIT, State.COMPLETED))
            seq += 1
            heapq.heappush(events, (now + arrivals.expovariate(1 / table.arrival_gap), seq, "write", index))
            if table.waiting_since is None and not table.running and table.deltas_since_compaction() >= delta_commits:
                table.waiting_since = now
        elif kind == "done":
            in_use -= 1
            table.running = False
            if table.deltas_since_compaction() >= delta_commits:
                table.waiting_since = now
        waiting = [t for t in fleet if t.waiting_since is not None and not t.running]
        if in_use < capacity and waiting:
            waiting.sort(key=lambda t: order(t, now))
            for chosen in waiting[: capacity - in_use]:
                duration = chosen.durations[chosen.next_duration]
                chosen.next_duration += 1
                # The plan covers the delta commits before it; it completes `duration` later.
                plan_time = _instant_time(now, chosen.tz_name)
                chosen.running, chosen.waiting_since = True, None
                in_use += 1
                seq += 1
                heapq.heappush(events, (now + duration, seq, "done", fleet.index(chosen)))
                chosen.history.insert(0, duration)
                chosen.instants.append(Instant(plan_time, Action.COMPACTION, State.REQUESTED))
        # a compaction completes: its plan instant becomes completed at its time
        if kind == "done":
            for n, i in enumerate(table.instants):
                if i.action is Action.COMPACTION and i.state is not State.COMPLETED:
                    table.instants[n] = i.with_state(State.COMPLETED)
            table.instants = _trim(table.instants)
    return _summary(fleet)


def _trim(instants: list[Instant]) -> list[Instant]:
    """Drop what the last completed compaction covers (archival would): keeps timelines small."""
    done = [i.requested_time for i in instants if i.action is Action.COMPACTION and i.is_completed]
    if not done:
        return instants
    last = max(done)
    return [i for i in instants if i.requested_time >= last]


def _summary(fleet: list[SimTable]) -> dict[str, float]:
    out: dict[str, float] = {}
    for label, members in (("tight", [t for t in fleet if t.tight]), ("loose", [t for t in fleet if not t.tight])):
        out[f"{label}_breaches"] = sum(t.breaches for t in members)
        out[f"{label}_breach_seconds"] = sum(t.seconds_in_breach for t in members)
        out[f"{label}_tables_breached"] = sum(1 for t in members if t.breaches)
    out["compactions"] = sum(len(t.history) for t in fleet)
    return out


def run(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-slo-"))
    started = time.monotonic()
    tables = write_tables(root, args.tables)
    wrote = time.monotonic() - started
    start = time.time()
    results = {}
    for label, order in (("slo", _key_slo), ("oldest-first", _key_oldest)):
        fleet = _fleet(tables, args, args.seed)
        began = time.monotonic()
        results[label] = simulate(
            fleet,
            order,
            start=start,
            horizon=args.hours * 3600,
            capacity=args.capacity,
            delta_commits=args.delta_commits,
            seed=args.seed,
        )
        results[label]["sim_seconds"] = time.monotonic() - began
    results["_"] = {"write_seconds": wrote}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--capacity", type=int, default=24, help="max_concurrent_actions (demand is about 25)")
    parser.add_argument("--hours", type=float, default=4.0, help="simulated time")
    parser.add_argument("--arrival-seconds", type=float, default=120.0, help="mean gap between a table's commits")
    parser.add_argument("--delta-commits", type=int, default=3, help="compaction due after this many")
    parser.add_argument("--mean-duration", type=float, default=90.0, help="mean compaction seconds")
    parser.add_argument("--tight-seconds", type=float, default=900.0, help="tight max_uncompacted_log_age_seconds")
    parser.add_argument("--loose-seconds", type=float, default=3600.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--dir", default=None, help="where the tables are written (reused when present)")
    args = parser.parse_args()
    results = run(args)
    print(
        f"{args.tables} tables, capacity {args.capacity}, {args.hours:g} h simulated, commits every "
        f"~{args.arrival_seconds:g}s, compaction after {args.delta_commits}, mean {args.mean_duration:g}s; "
        f"targets {args.tight_seconds:g}s (half) / {args.loose_seconds:g}s; tables written in "
        f"{results['_']['write_seconds']:.1f}s"
    )
    rows = [
        ("breaches, tight tables", "tight_breaches", "{:.0f}"),
        ("seconds in breach, tight tables", "tight_breach_seconds", "{:.0f}"),
        ("tight tables ever breached", "tight_tables_breached", "{:.0f}"),
        ("breaches, loose tables", "loose_breaches", "{:.0f}"),
        ("seconds in breach, loose tables", "loose_breach_seconds", "{:.0f}"),
        ("loose tables ever breached", "loose_tables_breached", "{:.0f}"),
        ("compactions run", "compactions", "{:.0f}"),
        ("simulation wall seconds", "sim_seconds", "{:.1f}"),
    ]
    print(f"{'':34}{'SLO order':>14}{'oldest-first':>14}")
    for title, key, fmt in rows:
        slo, oldest = results["slo"][key], results["oldest-first"][key]
        print(f"{title:34}{fmt.format(slo):>14}{fmt.format(oldest):>14}")
    total = {k: results[k]["tight_breaches"] + results[k]["loose_breaches"] for k in ("slo", "oldest-first")}
    print(f"{'breaches, all tables':34}{total['slo']:>14.0f}{total['oldest-first']:>14.0f}")


if __name__ == "__main__":
    main()
