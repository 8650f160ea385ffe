"""Work units executors run: compaction operations and clustering groups, as self-contained JSON."""

from __future__ import annotations

import json
from dataclasses import replace

from tableservice.errors import InvalidPlanError
from tableservice.hudi.action.cluster import ClusteringTask, run_clustering_task
from tableservice.hudi.action.compact import CompactionTask, run_compaction_task
from tableservice.hudi.models import HoodieWriteStat
from tableservice.storage import Storage

Task = CompactionTask | ClusteringTask


def task_from_json(text: str) -> Task:
    kind = json.loads(text).get("kind", "compaction")
    if kind == "compaction":
        return CompactionTask.from_json(text)
    if kind == "clustering":
        return ClusteringTask.from_json(text)
    raise InvalidPlanError(f"unknown task kind {kind!r}")


def run_task(storage: Storage, task: Task, write_token: str | None = None) -> list[HoodieWriteStat]:
    """Run one task; returns the write stats of the files it wrote."""
    if isinstance(task, CompactionTask):
        return [run_compaction_task(storage, replace(task, write_token=write_token or task.write_token))]
    return run_clustering_task(storage, replace(task, write_token=write_token or task.write_token))
