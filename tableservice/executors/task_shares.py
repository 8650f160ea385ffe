"""How the Spark tasks of one job share its tasks (compaction operations, clustering groups).

A job deals its tasks to Spark partitions before it runs, balanced by size (`spark.balanced`): partition `p` gets
the contiguous index range `share(p)`, heaviest first. The workers then do not run at one speed (on a 2-core VM, the
same compaction task took 0.20 CPU s on one worker and 0.29 s on the other in one job; the two partitions of a
clustering job ended up to 0.64 s apart), so one partition can idle while the other still has its share to run.

Under a local master every worker runs on the driver's machine, and the job hands them a directory of its own:
before a worker runs a task it claims it, by creating a file named by the task's index (made complete aside, then
linked into place: exactly one link succeeds). A worker that has run its own share then claims the other shares'
tasks from their ends (their lightest). A claim names the partition that made it, so a retried attempt of a
partition runs again what its failed attempt claimed (Spark drops a failed attempt's results; the commit path
deletes its files). Without a directory (a cluster, Spark Connect) each worker runs its share. The driver checks
that every task ran exactly once among the attempts Spark kept (`spark.run_tasks`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class TaskShares:
    count: int
    """Tasks in the job, indexes 0 .. count - 1."""
    partitions: int
    directory: str | None = None
    """Where the claims go (on the workers' machine); None: no sharing."""

    def share(self, partition: int) -> range:
        """The indexes dealt to `partition` (Spark's range partitioning of `range(count)`)."""
        return range(partition * self.count // self.partitions, (partition + 1) * self.count // self.partitions)

    def runs(self, partition: int, own: Iterable[int]) -> Iterator[int]:
        """The tasks `partition` runs, each claimed just before: its own (as Spark hands them over), then, with a
        directory, the other shares' unclaimed tasks, from each share's end."""
        directory = self.directory
        if directory is None:
            yield from own
            return
        for index in own:
            if _claim(directory, index, partition, own=True):
                yield index
        for step in range(1, self.partitions):
            for index in reversed(self.share((partition + step) % self.partitions)):
                if _claim(directory, index, partition, own=False):
                    yield index


def _claim(directory: str, index: int, partition: int, *, own: bool) -> bool:
    """Whether `partition` runs task `index`: it claimed it now, or an earlier attempt of it did. Where a claim
    cannot be made (the directory is gone or not writable), a partition runs its own tasks only."""
    path = os.path.join(directory, str(index))
    if os.path.exists(path):  # claimed already: read, no claim file made only to find out
        return claimant(path) == partition
    aside = f"{path}.{uuid.uuid4().hex}"
    try:
        with open(aside, "x", encoding="ascii") as f:
            f.write(str(partition))
        try:
            os.link(aside, path)
            return True
        except FileExistsError:
            return claimant(path) == partition
        finally:
            os.unlink(aside)
    except OSError:
        return own


def claimant(path: str) -> int | None:
    """The partition a claim file names (None when it does not read)."""
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None
