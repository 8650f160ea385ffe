"""Fault class (d): the ZooKeeper server stops or hangs while a pass holds the ZooKeeper table lock. The pass runs
with the lock configured (`locks:`, Hudi's `hoodie.write.lock.zookeeper.*` keys); at a chosen storage write (half
the trials: a write of the commit section, the timeline's completed instant file or a metadata-table write; the
others: any write) the crash hook (`crash_points.py`, mode `zk`) sends the server SIGKILL (it stops) or SIGSTOP (it
hangs: the sessions expire) and the pass goes on. The pass must complete (the write was past its last lock check)
or stop with a typed lock error (exit 1, no untyped traceback). Then the server comes back (SIGCONT, or a new
server on the same data dir and port), the recovery pass runs with the same lock configuration, and the checks of
`checks.py` must pass."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.support.faults import crash_points
from tests.support.faults.checks import check_table
from tests.support.faults.harness import Harness, TrialResult
from tests.support.faults.s3_faults import untyped
from tests.support.faults.tables import config_text, copy_table
from tests.support.zk.server import ZooKeeperServer

SIGNALS = ("KILL", "STOP")
SESSION_TIMEOUT_MS = 2000
# A completed instant file: `<instant>.<action>` or `<instant>_<completion>.<action>`, no `.requested`/`.inflight`.
COMPLETED = re.compile(r"/\.hoodie/(timeline/)?\d+(_\d+)?\.(?!inflight$|requested$)[a-z]+$")
CREATING = ("write_bytes", "create_if_absent", "rename", "open_output_stream")
LOCK_FAILURE = " failed: lock: "  # how `tableservice once` reports an action stopped by a LockError


def lock_config(server: ZooKeeperServer, key: str) -> str:
    return f"""locks:
  hoodie.write.lock.provider: zookeeper
  hoodie.write.lock.zookeeper.url: 127.0.0.1
  hoodie.write.lock.zookeeper.port: {server.port}
  hoodie.write.lock.zookeeper.base_path: /hudi/{key}
  hoodie.write.lock.zookeeper.session_timeout_ms: {SESSION_TIMEOUT_MS}
  hoodie.write.lock.zookeeper.connection_timeout_ms: 2000
  hoodie.write.lock.wait_time_ms: 10000
"""


def commit_section(path: str) -> bool:
    """A write of the commit section: a completed instant file of the table or a write of its metadata table."""
    return bool(COMPLETED.search(path)) or "/.hoodie/metadata/" in path


def _prepare(h: Harness, server: ZooKeeperServer, service: str, fault: str) -> tuple[Path, Path]:
    tpl = h.template(service)
    folder = h.trial_dir(service, fault.replace(" ", "-"))
    folder.mkdir(parents=True)
    path = folder / "t"
    copy_table(tpl.path, path)
    cfg = folder / "config.yaml"
    cfg.write_text(config_text(tpl.service, str(path), extra=lock_config(server, folder.name)))
    return path, cfg


def calibrate(h: Harness, server: ZooKeeperServer, service: str) -> list[Write]:
    """The storage writes (number, path) of one undisturbed pass of the service under the ZooKeeper lock."""
    key = f"zk:{service}"
    if key not in h.traces:
        _, cfg = _prepare(h, server, service, "zk calibrate")
        counter = cfg.with_name("writes.count")
        rc, last = h.run_pass(cfg, {crash_points.COUNTER: str(counter)})
        writes = _trace(counter)
        if rc != 0 or not writes:
            raise AssertionError(f"the {service} pass failed under the ZooKeeper lock: rc={rc} {last}")
        h.traces[key] = writes
    return h.traces[key]


@dataclass(frozen=True)
class Write:
    number: int
    at: float  # unix seconds
    op: str  # the Storage method
    path: str

    @property
    def completes(self) -> bool:
        """Writes a completed instant file of the table or of its metadata table."""
        return self.op in CREATING and bool(COMPLETED.search(self.path))


def _trace(counter: Path) -> list[Write]:
    out: list[Write] = []
    with contextlib.suppress(FileNotFoundError):
        for line in Path(str(counter) + ".trace").read_text().splitlines():
            number, _, at, op, *rest = line.split(" ", 4)
            out.append(Write(int(number), float(at), op, rest[0] if rest else ""))
    return sorted(out, key=lambda w: w.number)


def lost_at(log: str) -> float | None:
    """When the pass first marked its held locks lost (unix seconds, from its log), or None."""
    for line in log.splitlines():
        if "held lock(s) marked lost" in line:
            stamp = line.split(" ", 1)[0]
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return None


def wait_unlocked(server: ZooKeeperServer, base_path: str, timeout: float = 20.0) -> float:
    """Wait until no ephemeral node is left under `base_path` (the killed pass's session has expired: its lock and
    leases are free); returns the seconds waited."""
    from kazoo.client import KazooClient

    started = time.monotonic()
    client = KazooClient(hosts=server.connect_string, timeout=5.0)
    client.start(timeout=10.0)
    try:
        while time.monotonic() - started < timeout:
            if not _ephemerals(client, base_path):
                return time.monotonic() - started
            time.sleep(0.2)
        raise TimeoutError(
            f"ZooKeeper nodes still under {base_path} after {timeout}s: {_ephemerals(client, base_path)}"
        )
    finally:
        client.stop()
        client.close()


def _ephemerals(client: Any, path: str) -> list[str]:
    from kazoo.exceptions import NoNodeError

    try:
        children = client.get_children(path)
        _, stat = client.get(path)
    except NoNodeError:
        return []
    found = [path] if stat.ephemeralOwner else []
    for child in children:
        found += _ephemerals(client, f"{path}/{child}")
    return found


def restore(server: ZooKeeperServer, name: str) -> None:
    """Bring the server back: SIGCONT to a stopped one, a new one on the same data dir and port after a kill."""
    proc = server.proc
    assert proc is not None
    if name == "STOP":
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
        if proc.poll() is None:
            return
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait(timeout=10)
    server.proc = None
    server.start()


def zk_trial(
    h: Harness, server: ZooKeeperServer, service: str, name: str | None = None, *, commit: bool | None = None
) -> TrialResult:
    """One pass under the ZooKeeper lock with the server killed (KILL) or hung (STOP) at a storage write (of the
    commit section when `commit`; random choices when None), the recovery pass with the server back, the checks."""
    name = name if name is not None else h.rng.choice(SIGNALS)
    commit = commit if commit is not None else h.rng.random() < 0.5
    writes = calibrate(h, server, service)
    candidates = [w for w in writes if commit_section(w.path)] if commit else writes
    chosen = h.rng.choice(candidates or writes)
    at, target = chosen.number, chosen.path
    path, cfg = _prepare(h, server, service, f"zk {name}")
    counter = cfg.with_name("writes.count")
    assert server.proc is not None and server.proc.poll() is None, "ZooKeeper is not running"
    env = {
        crash_points.COUNTER: str(counter),
        crash_points.KILL_AT: str(at),
        crash_points.KILL_MODE: crash_points.ZK_MODE,
        crash_points.ZK_PID: str(server.proc.pid),
        crash_points.ZK_SIGNAL: name,
    }
    try:
        rc, last = h.run_pass(cfg, env, timeout=120)
    finally:
        restore(server, name)
    fired = Path(str(counter) + ".zk").exists()
    waited = wait_unlocked(server, f"/hudi/{cfg.parent.name}")
    log = cfg.with_name("pass.log").read_text(errors="replace")
    lost = lost_at(log)
    done = [w for w in _trace(counter) if w.number >= at and w.completes]
    late = [Path(w.path).name for w in done if lost is not None and w.at > lost]
    error = h.recover(cfg)
    findings = check_table(path, h.template(service).rows, h.template_files[service])
    detail = f"SIG{name} before write {at}/{len(writes)} {Path(target).name}; lock lost: {lost is not None}"
    if done:
        detail += f"; completed after the signal: {', '.join(Path(w.path).name for w in done)}"
    if late:
        detail += f"; COMPLETED AFTER THE LOCK WAS MARKED LOST: {', '.join(late)}"
    detail += f"; session gone after {waited:.1f}s"
    result = TrialResult(service, f"zk {name.lower()}", detail, fired, rc, last, error, findings)
    result.typed = not untyped(log) and (rc == 0 or (rc == 1 and LOCK_FAILURE in last))
    result.late_commits = late
    h.results.append(result)
    return result
