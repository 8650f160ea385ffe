"""`tableservice once` with `log.format: json` writes nothing but JSON lines, one event each, on a real local Spark:
the driver JVM's output (a log4j2 warning forced by a deprecated Spark key, banners, notices) is relayed as events
of `jvm.*`, Spark's progress bar is off, and compaction, clustering, clean and archival each report their
completion with the table and the instant that is on the table's timeline (or in its archive)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table

pytestmark = [pytest.mark.spark, pytest.mark.slow]

LEVELS = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}


def _config(path: str) -> str:
    return f"""\
service:
  http: {{host: 127.0.0.1, port: 0}}
  log: {{level: INFO, format: json, spark_level: WARN}}
spark:
  master: "local[1]"
  conf:
    spark.cache.class: unused   # deprecated since Spark 0.8: the driver JVM logs a warning about it at start
defaults:
  compaction:
    hoodie.compact.inline.max.delta.commits: 2
  clustering:
    schedule: true
    hoodie.clustering.async.max.commits: 2
    hoodie.clustering.plan.strategy.max.num.groups: 1
  clean:
    hoodie.cleaner.commits.retained: 1
  archival:
    hoodie.keep.min.commits: 2
    hoodie.keep.max.commits: 3
tables:
  - uri: {path}
    name: trips
"""


def _events(text: str, stream: str) -> list[dict[str, Any]]:
    """Every non-empty line as a JSON event with the keys every event has (an assertion error names the line)."""
    events = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as e:
            raise AssertionError(f"not a JSON line on {stream}: {line!r}") from e
        assert isinstance(event, dict), line
        assert {"time", "level", "logger", "message"} <= event.keys(), line
        assert event["level"] in LEVELS, line
        assert datetime.fromisoformat(event["time"]).tzinfo is not None, line
        events.append(event)
    return events


def test_once_in_json_mode_writes_one_json_event_per_line(tmp_path: Path) -> None:
    path = mor_table(tmp_path / "t", records=200, commits=8)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(_config(path))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run(
        [sys.executable, "-m", "tableservice", "once", "--config", str(cfg)],
        env=env,
        capture_output=True,
        timeout=240,
    )
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0, err[-3000:]
    assert "\r" not in out and "\r" not in err
    assert _events(out, "stdout") == []  # nothing at all on stdout: the pass is reported as log events
    events = _events(err, "stderr")

    # The driver JVM's output: relayed as events, at the JVM level (WARN) or above, no banner, no progress bar.
    jvm = [e for e in events if e["logger"].startswith("jvm.")]
    deprecated = [
        e for e in jvm if e["logger"] == "jvm.org.apache.spark.SparkConf" and "spark.cache.class" in e["message"]
    ]
    assert deprecated and {e["level"] for e in deprecated} == {"WARNING"}
    assert all(e["level"] in {"WARNING", "ERROR", "CRITICAL"} for e in jvm), jvm
    for banner in ("log4j profile", "Setting default log level", "sc.setLogLevel", "NativeCodeLoader", "[Stage "):
        assert not [e for e in events if banner in e["message"]], banner

    # Each service completed, reported with the table's one name (the configured `trips`, not Hudi's `t`) and the
    # instant it completed.
    table = HudiTable.open(Storage(), path)
    timeline = table.timeline(reload=True)
    done = {
        "compaction": [i.requested_time for i in timeline.completed().of_actions(Action.COMPACTION)],
        "clustering": [i.requested_time for i in timeline.completed().of_actions(Action.CLUSTERING)],
        "clean": [i.requested_time for i in timeline.completed().of_actions(Action.CLEAN)],
    }
    archived = sorted(i.requested_time for i in table.archived_instants())
    assert all(done.values()) and archived, (done, archived)
    for action, instants in done.items():
        completed = [e for e in events if e.get("action") == action and e["message"].startswith("completed")]
        service = [(e["table"], e["instant"]) for e in completed if e["logger"] != "tableservice.once"]
        assert service == [("trips", t) for t in sorted(instants)], action
        report = [(e["table"], e["instant"]) for e in completed if e["logger"] == "tableservice.once"]
        assert report == [("trips", t) for t in sorted(instants)], action
    archival = [e for e in events if e.get("action") == "archival"]
    assert [(e["logger"], e["table"], e.get("instant"), e["message"]) for e in archival] == [
        (
            "tableservice.hudi.action.archival",
            "trips",
            archived[-1],
            f"archived {len(archived)} instants ({archived[0]} .. {archived[-1]})",
        ),
        ("tableservice.once", "trips", None, f"archived {len(archived)} instants"),
    ]


def test_a_driver_jvm_that_cannot_start_says_why_in_json_events(tmp_path: Path) -> None:
    path = mor_table(tmp_path / "t", records=60, commits=3)
    cfg = tmp_path / "c.yaml"
    text = _config(path).replace("spark.cache.class: unused", "spark.driver.memory: lots")
    cfg.write_text(text)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run(
        [sys.executable, "-m", "tableservice", "once", "--config", str(cfg)],
        env=env,
        capture_output=True,
        timeout=240,
    )
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 1
    assert _events(out, "stdout") == []
    events = _events(err, "stderr")
    jvm = [(e["logger"], e["level"], e["message"]) for e in events if e["logger"].startswith("jvm.")]
    assert ("jvm.stderr", "WARNING", "Invalid maximum heap size: -Xmxlots") in jvm
    # Planning needs no Spark: the compaction is scheduled, then its execution fails on Spark's start; of the other
    # Spark services, those with work to do (pending or due) report the same error, the others say nothing.
    once = [e for e in events if e["logger"] == "tableservice.once"]
    assert (once[0]["level"], once[0]["table"]) == ("INFO", "trips")
    errors = once[1:]
    assert errors and all(e["level"] == "ERROR" and e["table"] == "trips" for e in errors)
    assert errors[0]["action"] == "compaction" and once[0]["message"] == f"scheduled {errors[0]['instant']}"
    assert {e["action"] for e in errors} <= {"compaction", "clustering", "indexing"}
    assert all("JAVA_GATEWAY_EXITED" in e["message"] for e in errors)
