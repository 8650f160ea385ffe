"""How the Spark tasks of one job share its tasks (`executors.task_shares`), and the driver's check that every task
ran exactly once (`spark.ran_once`). The partitions are threads here: the claims are files, as between workers."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tableservice.errors import SparkJobError
from tableservice.executors.spark import ran_once, shared_tasks
from tableservice.executors.task_shares import TaskShares, claimant


def test_shares_are_spark_range_partitions() -> None:
    shares = TaskShares(16, 3)
    assert [list(shares.share(p)) for p in range(3)] == [list(range(0, 5)), list(range(5, 10)), list(range(10, 16))]


def test_without_a_directory_each_partition_runs_what_it_is_handed() -> None:
    shares = TaskShares(6, 2)
    assert list(shares.runs(0, [0, 1, 2])) == [0, 1, 2]
    assert list(shares.runs(1, [3, 4, 5])) == [3, 4, 5]


def test_a_partition_done_early_takes_the_others_tasks_from_their_end(tmp_path: Path) -> None:
    shares = TaskShares(8, 2, str(tmp_path))
    slow = shares.runs(1, list(shares.share(1)))
    assert next(slow) == 4  # partition 1 is still on its first task
    fast = list(shares.runs(0, list(shares.share(0))))
    assert fast == [0, 1, 2, 3, 7, 6, 5]  # its own, then partition 1's, lightest (last dealt) first
    assert list(slow) == []  # nothing left for partition 1
    assert {i: claimant(str(tmp_path / str(i))) for i in range(8)} == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 0, 6: 0, 7: 0}
    assert sorted(os.listdir(tmp_path)) == sorted(str(i) for i in range(8))  # no claim left half-made


def test_a_retried_attempt_runs_again_what_its_partition_claimed(tmp_path: Path) -> None:
    shares = TaskShares(6, 2, str(tmp_path))
    first = shares.runs(1, [3, 4, 5])
    assert [next(first), next(first)] == [3, 4]  # then the attempt fails
    assert list(shares.runs(0, [0, 1, 2])) == [0, 1, 2, 5]  # partition 0 takes what was not claimed
    assert list(shares.runs(1, [3, 4, 5])) == [3, 4]  # the retry: its own claims again, not partition 0's


def test_claims_that_cannot_be_made_leave_each_partition_its_own_share(tmp_path: Path) -> None:
    shares = TaskShares(4, 2, str(tmp_path / "gone"))
    assert list(shares.runs(0, [0, 1])) == [0, 1]
    assert list(shares.runs(1, [2, 3])) == [2, 3]


def test_concurrent_partitions_run_every_task_exactly_once(tmp_path: Path) -> None:
    count, partitions = 200, 4
    shares = TaskShares(count, partitions, str(tmp_path))
    ran: dict[int, list[int]] = {p: [] for p in range(partitions)}
    start = threading.Barrier(partitions)

    def partition(p: int) -> None:
        start.wait()
        for index in shares.runs(p, list(shares.share(p))):
            ran[p].append(index)

    threads = [threading.Thread(target=partition, args=(p,)) for p in range(partitions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = sorted(i for indexes in ran.values() for i in indexes)
    assert everything == list(range(count))
    for p, indexes in ran.items():
        assert all(claimant(str(tmp_path / str(i))) == p for i in indexes)


def test_the_claims_directory_is_for_local_masters_with_tasks_to_share_and_is_removed() -> None:
    with shared_tasks(16, 2, local=True) as shares:
        assert shares.directory is not None and os.path.isdir(shares.directory)
        directory = shares.directory
        assert list(shares.runs(0, [0])) == [0, *range(15, 7, -1)]  # partition 1 never came
    assert not os.path.exists(directory)
    for count, partitions, local in ((16, 2, False), (2, 2, True), (16, 1, True)):
        with shared_tasks(count, partitions, local) as shares:
            assert shares.directory is None


def test_the_driver_refuses_a_job_whose_tasks_did_not_each_run_once() -> None:
    ran_once("compact t 1", 4, [2, 0, 3, 1])
    with pytest.raises(SparkJobError, match=r"not run \[2\], run more than once or unknown \[\]"):
        ran_once("compact t 1", 4, [0, 1, 3])
    with pytest.raises(SparkJobError, match=r"not run \[\], run more than once or unknown \[1\]"):
        ran_once("compact t 1", 4, [0, 1, 1, 2, 3])
    with pytest.raises(SparkJobError, match=r"unknown \[7\]"):
        ran_once("compact t 1", 4, [0, 1, 2, 3, 7])
