"""The fault harness: a trial copies a service's template table, runs one daemon pass (`tableservice once`) as a
subprocess in its own process group with one fault injected, runs the next pass in-process with no fault (the
recovery pass), then checks the table (`checks.py`). `tests/faults` runs a few trials per cell, `bench/faults.py`
many."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tableservice.config import load_config
from tableservice.errors import TableServiceError
from tableservice.service.table_worker import TableWorker
from tableservice.service.wiring import LockProviders, storage_options, table_settings
from tableservice.storage import Storage
from tests.support.faults import crash_points
from tests.support.faults.checks import Findings, check_table, data_files
from tests.support.faults.tables import SERVICES, Template, build_template, config_text, copy_table

REPO = Path(__file__).resolve().parents[3]
HOOK = Path(__file__).resolve().with_name("hook")
KILL_MODES = ("before", "torn", "after")


@dataclass
class TrialResult:
    service: str
    fault: str
    detail: str
    fired: bool  # the fault happened while the action ran (else the pass completed untouched)
    child_rc: int
    child_error: str  # the last line the pass wrote to stderr
    recovery_error: str | None
    findings: Findings
    named_file: bool | None = None  # damaged files: the error named the damaged file
    unchanged: bool | None = None  # damaged files: every other file byte-identical after the trial
    expected_error: bool | None = None  # damaged files: the action stopped with a PermanentError
    typed: bool | None = None  # S3 and ZooKeeper faults: the pass succeeded or stopped with a typed error
    late_commits: list[str] = field(default_factory=list)  # ZooKeeper: completed instants written after lock loss

    @property
    def recovered(self) -> bool:
        return self.recovery_error is None and self.findings.clean

    @property
    def ok(self) -> bool:
        """Recovered, and no untyped error on the way."""
        return self.recovered and self.typed is not False

    def describe(self) -> str:
        return (
            f"{self.service}/{self.fault} [{self.detail}] fired={self.fired} rc={self.child_rc} "
            + ("" if self.typed is not False else "UNTYPED ")
            + f"recovery={self.recovery_error or 'ok'} findings={self.findings.summary()}"
            + (f" child: {self.child_error}" if self.child_error else "")
        )


@dataclass
class Harness:
    """Templates, calibrations and the recovery executor shared by the trials of one run."""

    root: Path
    executor: Any  # a SparkExecutor for the recovery passes (started only when a recovery runs a job)
    seed: int = 1
    templates: dict[str, Template] = field(default_factory=dict)
    template_files: dict[str, set[str]] = field(default_factory=dict)
    calibration: dict[str, int] = field(default_factory=dict)
    traces: dict[str, list[Any]] = field(default_factory=dict)  # the storage writes of a calibration pass
    results: list[TrialResult] = field(default_factory=list)
    _serial: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.root.mkdir(parents=True, exist_ok=True)

    # --- tables -----------------------------------------------------------------------------------

    def template(self, service: str) -> Template:
        if service not in self.templates:
            tpl = build_template(SERVICES[service], self.root / "templates" / service)
            self.templates[service] = tpl
            self.template_files[service] = data_files(tpl.path)
        return self.templates[service]

    def trial_dir(self, service: str, fault: str) -> Path:
        self._serial += 1
        return self.root / "trials" / f"{self._serial:05d}-{service}-{fault}"

    def prepare(self, service: str, fault: str, table: Path | None = None, extra: str = "") -> tuple[Path, Path]:
        """A fresh copy of the service's template (at `table` when given) and the trial's configuration."""
        tpl = self.template(service)
        folder = self.trial_dir(service, fault)
        folder.mkdir(parents=True)
        path = table if table is not None else folder / "t"
        copy_table(tpl.path, path)
        cfg = folder / "config.yaml"
        cfg.write_text(config_text(tpl.service, str(path), extra=extra))
        return path, cfg

    # --- the action in a subprocess -----------------------------------------------------------------

    def child_env(self, extra: dict[str, str]) -> dict[str, str]:
        path = os.pathsep.join(p for p in (str(HOOK), str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        return dict(os.environ, PYTHONPATH=path, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1", **extra)

    def run_pass(self, cfg: Path, env: dict[str, str], timeout: float = 600) -> tuple[int, str]:
        """`tableservice once` in its own process group; its whole group is gone when this returns."""
        log = cfg.with_name("pass.log")
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tableservice", "once", "--config", str(cfg)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.child_env(env),
                start_new_session=True,
                cwd=cfg.parent,
            )
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = -999
            finally:
                reap_group(proc.pid)
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if "Error" in ln or "failed" in ln]
        return rc, lines[-1] if lines else ""

    def calibrate(self, service: str) -> int:
        """Storage writes of one undisturbed pass of the service on its template (the range of kill points)."""
        if service not in self.calibration:
            _, cfg = self.prepare(service, "calibrate")
            counter = cfg.with_name("writes.count")
            rc, last = self.run_pass(cfg, {crash_points.COUNTER: str(counter)})
            count = crash_points.read_count(str(counter))
            if rc != 0 or count == 0:
                raise AssertionError(f"the {service} pass did nothing on its template: rc={rc} writes={count} {last}")
            self.calibration[service] = count
        return self.calibration[service]

    # --- recovery and checks ------------------------------------------------------------------------

    def recover(self, cfg: Path) -> str | None:
        """The next pass, in this process, with no fault; returns what failed (None: nothing)."""
        config = load_config(str(cfg))
        entry = config.tables[0]
        locks = LockProviders()
        try:
            opts = storage_options(config)
            worker = TableWorker(
                table_settings(config, entry),
                Storage(opts),
                locks.for_table(config, entry),
                self.executor,
                storage_options=opts,
            )
            result = worker.run_pass()
        except TableServiceError as e:
            return f"{type(e).__name__}: {e}"
        finally:
            locks.close()
        failed = [f"{f.action} {f.instant}: {type(f.error).__name__}: {f.error}" for f in result.failed]
        return "; ".join(failed) or None

    def finish(
        self, service: str, fault: str, detail: str, path: Path, cfg: Path, fired: bool, rc: int, last: str
    ) -> TrialResult:
        error = self.recover(cfg)
        findings = check_table(path, self.template(service).rows, self.template_files[service])
        result = TrialResult(service, fault, detail, fired, rc, last, error, findings)
        self.results.append(result)
        return result

    # --- (a) kill -9 ------------------------------------------------------------------------------

    def kill_trial(self, service: str) -> TrialResult:
        """SIGKILL to the whole process group of the pass at a random storage write (before it, with its temp
        file written but not renamed, or some milliseconds after it)."""
        total = self.calibrate(service)
        at = self.rng.randint(1, total)
        mode = self.rng.choice(KILL_MODES)
        delay = self.rng.randint(0, 50) if mode == "after" else 0
        path, cfg = self.prepare(service, "kill")
        env = {
            crash_points.COUNTER: str(cfg.with_name("writes.count")),
            crash_points.KILL_AT: str(at),
            crash_points.KILL_MODE: mode,
            crash_points.KILL_DELAY_MS: str(delay),
        }
        rc, last = self.run_pass(cfg, env)
        detail = f"write {at}/{total} {mode}" + (f" +{delay}ms" if mode == "after" else "")
        return self.finish(service, "kill", detail, path, cfg, rc == -signal.SIGKILL, rc, last)


def reap_group(pgid: int, timeout: float = 10) -> None:
    """SIGKILL whatever is left of a process group and wait until it is empty."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        time.sleep(0.05)


@contextmanager
def lazy_executor(master: str = "local[2]") -> Iterator[Any]:
    """A SparkExecutor for recovery passes outside pytest (started by the first job)."""
    from tableservice.executors.spark import SparkExecutor, SparkSettings

    executor = SparkExecutor(
        SparkSettings(master=master, conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})
    )
    try:
        yield executor
    finally:
        executor.stop()


Runner = Callable[[Harness, str], TrialResult]
