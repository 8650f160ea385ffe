"""Fault class (b): S3 faults. The service's template table is copied into a bucket of the moto server; the pass
(`tableservice once`, its storage endpoint the fault proxy of `s3_proxy.py`) runs with faults injected; the
recovery pass runs through the proxy with none; then the checks: hudi-rs reads the table straight from moto (no
proxy) and must hold the model's rows, and a byte copy of the table (downloaded from moto) goes through the
harness's other checks (orphans, pending instants, the metadata table against storage)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.faults.checks import Findings, check_table, compare_rows
from tests.support.faults.harness import Harness, TrialResult
from tests.support.faults.s3_proxy import KINDS, FaultPlan, FaultProxy
from tests.support.faults.tables import COLUMNS, config_text
from tests.support.oracle import hudi_read
from tests.support.servers import MotoServer, moto_server
from tests.support.table_model import Row

# What a pass prints when an error it did not type reached it (`cmd_once`'s catch-all, or a crash).
UNTYPED_MARKS = ("unexpected ", "Traceback (most recent call last)")
TASK_ERROR = "<tableservice-task-error>"
TIMEOUT_HOLD = 4.0  # seconds: longer than the AWS SDK's 3 s request timeout (pyarrow), then the proxy closes


@dataclass
class S3Env:
    moto: MotoServer
    proxy: FaultProxy
    bucket: str

    def client(self) -> Any:
        import boto3

        m = self.moto
        return boto3.client(
            "s3",
            endpoint_url=m.endpoint_url,
            region_name=m.region,
            aws_access_key_id=m.access_key_id,
            aws_secret_access_key=m.secret_access_key,
        )

    def hudi_options(self) -> dict[str, str]:
        """hudi-rs's storage options for the moto server itself (never the proxy)."""
        m = self.moto
        return {
            "aws_endpoint_url": m.endpoint_url,
            "aws_allow_http": "true",
            "aws_access_key_id": m.access_key_id,
            "aws_secret_access_key": m.secret_access_key,
            "aws_region": m.region,
        }

    def upload(self, folder: Path, prefix: str) -> None:
        client = self.client()
        for p in sorted(folder.rglob("*")):
            key = f"{prefix}/{p.relative_to(folder)}"
            if p.is_file():
                client.put_object(Bucket=self.bucket, Key=key, Body=p.read_bytes())

    def download(self, prefix: str, dest: Path) -> Path:
        """A byte copy of every object under `prefix` (straight from moto)."""
        client = self.client()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix + "/"):
            for obj in page.get("Contents", []):
                rel = obj["Key"][len(prefix) + 1 :]
                target = dest / rel
                if rel.endswith("/") or not rel:
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(client.get_object(Bucket=self.bucket, Key=obj["Key"])["Body"].read())
        return dest


@contextmanager
def s3_env(moto: MotoServer | None = None, bucket: str = "faults") -> Iterator[S3Env]:
    """The proxy (and, without `moto`, a moto server of its own) and a bucket; the credentials in the environment
    for the passes and Spark's workers."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", MotoServer.access_key_id)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", MotoServer.secret_access_key)
    with _moto(moto) as server, FaultProxy(server.endpoint_url) as proxy:
        env = S3Env(server, proxy, bucket)
        env.client().create_bucket(Bucket=bucket)
        yield env


@contextmanager
def _moto(moto: MotoServer | None) -> Iterator[MotoServer]:
    if moto is not None:
        yield moto
        return
    with moto_server() as server:
        yield server


def untyped(log: str) -> bool:
    """Whether the pass met an error it did not type: `cmd_once`'s catch-all line, or a traceback other than Spark's
    report of a task that failed with a typed error (the task carries it encoded: `<tableservice-task-error>`)."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if UNTYPED_MARKS[0] in line and ": unexpected " in line:
            return True
        if UNTYPED_MARKS[1] in line:
            spark_task = "PythonException" in line and any(TASK_ERROR in ln for ln in lines[i : i + 12])
            if not spark_task:
                return True
    return False


def _prepare(h: Harness, env: S3Env, service: str, fault: str) -> tuple[str, str, Path]:
    """The template uploaded under a fresh prefix; returns (prefix, table URI, config path)."""
    tpl = h.template(service)
    folder = h.trial_dir(service, fault.replace(" ", "-"))
    folder.mkdir(parents=True)
    prefix = f"{folder.name}/t"
    env.upload(tpl.path, prefix)
    uri = f"s3://{env.bucket}/{prefix}"
    storage = f"storage: {{endpoint_url: '{env.proxy.endpoint_url}', region: {env.moto.region}}}\n"
    cfg = folder / "config.yaml"
    cfg.write_text(config_text(tpl.service, uri, extra=storage))
    return prefix, uri, cfg


def calibrate(h: Harness, env: S3Env, service: str) -> int:
    """S3 requests of one undisturbed pass of the service on its template (the range of first faulty requests)."""
    key = f"s3:{service}"
    if key not in h.calibration:
        _, _, cfg = _prepare(h, env, service, "s3 calibrate")
        env.proxy.arm(None)
        rc, last = h.run_pass(cfg, {})
        if rc != 0 or env.proxy.requests == 0:
            raise AssertionError(f"the {service} pass failed on S3 without faults: rc={rc} {last}")
        h.calibration[key] = env.proxy.requests
    return h.calibration[key]


def plan_for(h: Harness, kind: str, total: int, *, short: bool = False) -> FaultPlan:
    """A random plan: a burst (1, 2, 3 or every request from a random one on) or (a quarter of the plans) a
    probability per request. Timeouts cost seconds each, so their bursts stay short and their probability low.
    `short` (CI): bursts of 1 to 3 faults only (3 exhaust the SDKs' 3 attempts: the operation fails), a timeout
    burst of 1."""
    start = h.rng.randint(1, total)
    after = kind in ("reset", "timeout") and h.rng.random() < 0.5
    seed = h.rng.randint(0, 2**31)
    if h.rng.random() < 0.25 and not short:
        p = 0.03 if kind == "timeout" else h.rng.choice((0.05, 0.1, 0.2))
        return FaultPlan(kind, start=start, probability=p, after=after, hold=TIMEOUT_HOLD, seed=seed)
    counts: tuple[int | None, ...] = (1, 2, 3) if kind == "timeout" else (1, 2, 3, None)
    if short:
        counts = (1,) if kind == "timeout" else (1, 2, 3)
    return FaultPlan(kind, start=start, count=h.rng.choice(counts), after=after, hold=TIMEOUT_HOLD, seed=seed)


def s3_trial(
    h: Harness, env: S3Env, service: str, kind: str | None = None, *, short: bool = False, read_s3: bool = True
) -> TrialResult:
    """One pass with S3 faults of one kind (random when None), the recovery pass without, then the checks (with
    `read_s3` False, hudi-rs reads only the byte copy: its read from moto takes seconds)."""
    kind = kind if kind is not None else h.rng.choice(KINDS)
    total = calibrate(h, env, service)
    plan = plan_for(h, kind, total, short=short)
    prefix, uri, cfg = _prepare(h, env, service, f"s3 {kind}")
    env.proxy.arm(plan)
    try:
        rc, last = h.run_pass(cfg, {}, timeout=300)
    finally:
        injected, requests = env.proxy.injected, env.proxy.requests
        env.proxy.arm(None)
    log = cfg.with_name("pass.log").read_text(errors="replace")
    error = h.recover(cfg)
    local = env.download(prefix, cfg.parent / "copy")
    findings = check_table(local, h.template(service).rows, h.template_files[service])
    if read_s3:
        _check_rows_on_s3(env, uri, h.template(service).rows, findings)
    detail = f"{plan.describe()} of {total}; {injected} injected in {requests} requests"
    result = TrialResult(service, f"s3 {kind}", detail, injected > 0, rc, last, error, findings)
    result.typed = not untyped(log) and rc in (0, 1)
    h.results.append(result)
    return result


def _check_rows_on_s3(env: S3Env, uri: str, model: list[Row], findings: Findings) -> None:
    """The rows once more, as hudi-rs reads them from the bucket; the worse count of both reads stays."""
    try:
        table = hudi_read(uri, columns=COLUMNS, storage_options=env.hudi_options())
    except Exception as e:  # the oracle cannot read the table: reported, never hidden
        findings.read_error = f"{type(e).__name__}: {e}"
        return
    rows = [{c: r[c] for c in COLUMNS} for r in table.select(COLUMNS).to_pylist()]
    on_s3 = Findings()
    compare_rows(rows, model, on_s3)
    findings.rows_lost = max(findings.rows_lost, on_s3.rows_lost)
    findings.rows_duplicated = max(findings.rows_duplicated, on_s3.rows_duplicated)
    findings.rows_changed = max(findings.rows_changed, on_s3.rows_changed)
