"""SLO-driven priority against oldest-first on a fleet: breaches per class of table (python -m bench.slo).

N small merge-on-read tables are written on local disk with the write client; their real timelines seed a
discrete-event simulation on a virtual clock (no Spark, no sleeping): delta commits arrive at each table
(exponential gaps, seeded), compaction is due after `--delta-commits` of them, and a free slot (`--capacity`,
the daemon's `max_concurrent_actions`) goes to the waiting table the ordering picks. Action durations are drawn
from a fixed log-normal distribution per table (seeded; the same draws in every run). A third of the tables have
a tight `max_uncompacted_log_age_seconds`, a third a loose one, a third none (their log age is measured against the
loose limit, which the ordering does not see). Three policies run over the same arrivals:

- oldest-first: the trigger makes compaction due; the table waiting longest goes first.
- order only (the previous round): the trigger; `risk_key` without a wait budget (tables without targets wait
  behind those with targets).
- SLO: what the daemon does now: the trigger or `slo_due` (a target within the expected duration plus one poll of
  its breach makes compaction due, asked at each poll), and `risk_key` with the implicit deadline
  (`--wait-budget` after the work began to wait).

The ordering and due code is the real `planning/slo.py`: `readings` on the table's timeline, the expected duration
from the table's simulated history (mean of its last completed compactions). Breaches (transitions into breach),
seconds in breach and the largest log age are read from the same `readings` on a fixed grid. Two fleets: the
default capacity (demand slightly above it) and an overloaded one (`--overloaded-capacity`).
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
from tableservice.planning.slo import (
    DueWork,
    SloReading,
    SloTargets,
    expected_duration,
    readings,
    risk_key,
    slo_due,
)
from tableservice.storage import Storage

GRID_SECONDS = 10.0
CLASSES = ("tight", "loose", "none")


@dataclass
class SimTable:
    name: str
    kind: str  # tight | loose | none
    targets: SloTargets  # what the ordering sees
    measured: SloTargets  # what breaches are counted against (the loose limit for tables without targets)
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
    max_age: float = 0.0
    slo_forced: int = 0  # passes made due by a target rather than the trigger

    def timeline(self) -> Timeline:
        return Timeline(tuple(sorted(self.instants)), self.layout)

    def deltas_since_compaction(self) -> int:
        last = max((i.requested_time for i in self.instants if i.action is Action.COMPACTION), default="")
        return sum(1 for i in self.instants if i.action is Action.DELTA_COMMIT and i.requested_time > last)


@dataclass(frozen=True)
class Policy:
    name: str
    order: Callable[[SimTable, float], tuple[float, str]]
    slo_due: bool  # targets close to breach make compaction due


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
        mix = getattr(args, "mix", CLASSES)  # the classes, assigned to the tables in turn
        kind = mix[i % len(mix)]
        tight = SloTargets(max_uncompacted_log_age_seconds=args.tight_seconds)
        loose = SloTargets(max_uncompacted_log_age_seconds=args.loose_seconds)
        sigma = 0.6
        mu = math.log(args.mean_duration) - sigma * sigma / 2
        fleet.append(
            SimTable(
                name=f"t{i:03d}",
                kind=kind,
                targets={"tight": tight, "loose": loose, "none": SloTargets()}[kind],
                measured=tight if kind == "tight" else loose,
                instants=list(snapshot.timeline),
                layout=snapshot.timeline.layout_version,
                tz_name=snapshot.config.timezone_name,
                arrival_gap=rng.uniform(0.5, 1.5) * args.arrival_seconds,
                durations=[rng.lognormvariate(mu, sigma) for _ in range(10_000)],
            )
        )
    return fleet


def _readings(table: SimTable, targets: SloTargets, now: float) -> list[SloReading]:
    return readings(table.timeline(), targets, is_mor=True, tz=timeline_timezone(table.tz_name), now=now)


def _work(table: SimTable, now: float) -> DueWork:
    assert table.waiting_since is not None
    pending = _instant_time(table.waiting_since, table.tz_name)
    found = _readings(table, table.targets, now)
    return DueWork(table.name, found, frozenset({"compaction"}), pending, table.waiting_since)


def _expected(table: SimTable) -> dict[str, float]:
    return {"compaction": expected_duration(table.history)}


def policies(args: argparse.Namespace) -> list[Policy]:
    def oldest(table: SimTable, now: float) -> tuple[float, str]:
        assert table.waiting_since is not None
        return (table.waiting_since, table.name)

    def order_only(table: SimTable, now: float) -> tuple[float, str]:
        return risk_key(_work(table, now), _expected(table), now=now, budget=math.inf)

    def slo(table: SimTable, now: float) -> tuple[float, str]:
        return risk_key(_work(table, now), _expected(table), now=now, budget=args.wait_budget)

    return [Policy("oldest-first", oldest, False), Policy("order only", order_only, False), Policy("SLO", slo, True)]


def simulate(
    fleet: list[SimTable],
    policy: Policy,
    *,
    start: float,
    horizon: float,
    capacity: int,
    delta_commits: int,
    poll_seconds: float,
    seed: int,
) -> dict[str, float]:
    rng = random.Random(seed)  # the same arrivals for every policy
    events: list[tuple[float, int, str, int]] = []  # (time, seq, kind, table index)
    seq = 0
    for index, table in enumerate(fleet):
        events.append((start + rng.expovariate(1 / table.arrival_gap), seq, "write", index))
        seq += 1
    events.append((start + GRID_SECONDS, seq, "grid", -1))
    events.append((start + poll_seconds, seq + 1, "poll", -1))
    seq += 2
    heapq.heapify(events)
    in_use = 0
    end = start + horizon
    arrivals = random.Random(seed + 1)
    while events:
        now, _, kind, index = heapq.heappop(events)
        if now > end:
            break
        if kind == "grid":
            for table in fleet:
                (reading,) = _readings(table, table.measured, now)
                table.max_age = max(table.max_age, reading.value)
                if reading.breached:
                    table.seconds_in_breach += GRID_SECONDS
                    if not table.breached:
                        table.breaches += 1
                table.breached = reading.breached
            seq += 1
            heapq.heappush(events, (now + GRID_SECONDS, seq, "grid", -1))
            continue
        if kind == "poll":  # the daemon's polls: a target close to breach makes compaction due
            if policy.slo_due:
                for table in fleet:
                    if table.waiting_since is not None or table.running or not table.targets:
                        continue
                    expected = _expected(table)["compaction"]
                    if slo_due(_readings(table, table.targets, now), "compaction", expected, poll_seconds):
                        table.waiting_since = now
                        table.slo_forced += 1
            seq += 1
            heapq.heappush(events, (now + poll_seconds, seq, "poll", -1))
        elif kind == "write":
            table = fleet[index]
            table.instants.append(Instant(_instant_time(now, table.tz_name), Action.DELTA_COMMIT, State.COMPLETED))
            seq += 1
            heapq.heappush(events, (now + arrivals.expovariate(1 / table.arrival_gap), seq, "write", index))
            if table.waiting_since is None and not table.running and table.deltas_since_compaction() >= delta_commits:
                table.waiting_since = now
        elif kind == "done":
            table = fleet[index]
            in_use -= 1
            table.running = False
            # the compaction completes: its plan instant becomes completed
            for n, i in enumerate(table.instants):
                if i.action is Action.COMPACTION and i.state is not State.COMPLETED:
                    table.instants[n] = i.with_state(State.COMPLETED)
            table.instants = _trim(table.instants)
            if table.deltas_since_compaction() >= delta_commits:
                table.waiting_since = now
        waiting = [t for t in fleet if t.waiting_since is not None and not t.running]
        if in_use < capacity and waiting:
            waiting.sort(key=lambda t: policy.order(t, now))
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
    for kind in CLASSES:
        members = [t for t in fleet if t.kind == kind]
        out[f"{kind}_breaches"] = sum(t.breaches for t in members)
        out[f"{kind}_breach_seconds"] = sum(t.seconds_in_breach for t in members)
        out[f"{kind}_tables_breached"] = sum(1 for t in members if t.breaches)
        out[f"{kind}_max_age"] = max((t.max_age for t in members), default=0.0)
    out["compactions"] = sum(len(t.history) for t in fleet)
    out["slo_forced"] = sum(t.slo_forced for t in fleet)
    return out


def run(args: argparse.Namespace, tables: list[HudiTable], capacity: int) -> dict[str, dict[str, float]]:
    start = time.time()
    results = {}
    for policy in policies(args):
        fleet = _fleet(tables, args, args.seed)
        began = time.monotonic()
        results[policy.name] = simulate(
            fleet,
            policy,
            start=start,
            horizon=args.hours * 3600,
            capacity=capacity,
            delta_commits=args.delta_commits,
            poll_seconds=args.poll_seconds,
            seed=args.seed,
        )
        results[policy.name]["sim_seconds"] = time.monotonic() - began
    return results


ROWS = [
    *(
        row
        for kind, title in (("tight", "tight"), ("loose", "loose"), ("none", "no target"))
        for row in (
            (f"breaches, {title}", f"{kind}_breaches", "{:.0f}"),
            (f"seconds in breach, {title}", f"{kind}_breach_seconds", "{:.0f}"),
            (f"tables ever breached, {title}", f"{kind}_tables_breached", "{:.0f}"),
            (f"largest log age s, {title}", f"{kind}_max_age", "{:.0f}"),
        )
    ),
    ("compactions run", "compactions", "{:.0f}"),
    ("made due by a target", "slo_forced", "{:.0f}"),
    ("simulation wall seconds", "sim_seconds", "{:.1f}"),
]


def show(title: str, results: dict[str, dict[str, float]]) -> None:
    names = list(results)
    print(title)
    print(f"{'':34}" + "".join(f"{n:>14}" for n in names))
    for label, key, fmt in ROWS:
        print(f"{label:34}" + "".join(f"{fmt.format(results[n][key]):>14}" for n in names))
    total = {n: sum(results[n][f"{k}_breaches"] for k in CLASSES) for n in names}
    print(f"{'breaches, all tables':34}" + "".join(f"{total[n]:>14.0f}" for n in names))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=99)
    parser.add_argument("--capacity", type=int, default=24, help="max_concurrent_actions (demand is about 25)")
    parser.add_argument("--overloaded-capacity", type=int, default=18, help="the second, overloaded run")
    parser.add_argument("--hours", type=float, default=4.0, help="simulated time")
    parser.add_argument("--arrival-seconds", type=float, default=120.0, help="mean gap between a table's commits")
    parser.add_argument("--delta-commits", type=int, default=3, help="compaction due after this many")
    parser.add_argument("--mean-duration", type=float, default=90.0, help="mean compaction seconds")
    parser.add_argument("--tight-seconds", type=float, default=900.0, help="tight max_uncompacted_log_age_seconds")
    parser.add_argument("--loose-seconds", type=float, default=3600.0)
    parser.add_argument("--wait-budget", type=float, default=3600.0, help="service.wait_budget_seconds")
    parser.add_argument("--poll-seconds", type=float, default=30.0, help="service.poll_interval_seconds")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--dir", default=None, help="where the tables are written (reused when present)")
    args = parser.parse_args()
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-slo-"))
    started = time.monotonic()
    tables = write_tables(root, args.tables)
    print(
        f"{args.tables} tables (a third each: {args.tight_seconds:g}s target, {args.loose_seconds:g}s target, none), "
        f"{args.hours:g} h simulated, commits every ~{args.arrival_seconds:g}s, compaction after "
        f"{args.delta_commits}, mean {args.mean_duration:g}s, polls every {args.poll_seconds:g}s, wait budget "
        f"{args.wait_budget:g}s; tables written in {time.monotonic() - started:.1f}s"
    )
    for capacity in (args.capacity, args.overloaded_capacity):
        show(f"\ncapacity {capacity}", run(args, tables, capacity))


if __name__ == "__main__":
    main()
