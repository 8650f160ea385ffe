"""Two more fault classes: (c) a full disk (the table on a small tmpfs, so a write of the action fails with
ENOSPC) and (e) damaged committed files (a log file truncated, emptied, with bytes inserted mid-block or appended;
a base file a completed commit names deleted). Needs root for the tmpfs mounts."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tableservice import errors
from tableservice.cli.messages import kind_class
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.storage import Storage
from tests.support.faults.checks import Findings, data_files
from tests.support.faults.harness import Harness, TrialResult

# The services whose action reads committed data files (log and base files of the data table).
READERS = ("compaction", "clustering", "indexing")
DAMAGES = ("truncate", "zero-length", "insert-mid-block", "append", "delete-base-file")


@contextlib.contextmanager
def tmpfs(folder: Path, size_kb: int) -> Iterator[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _used_kb(folder: Path) -> int:
    st = os.statvfs(folder)
    return (st.f_blocks - st.f_bfree) * st.f_frsize // 1024


def enospc_trial(h: Harness, service: str) -> TrialResult:
    """The pass runs with a few KiB free: some write of the action fails with ENOSPC; the disk is then given room
    and the next pass recovers."""
    folder = h.trial_dir(service, "enospc")
    headroom = h.rng.choice((0, 4, 8, 12, 16, 24))
    mount = folder / "disk"
    with tmpfs(mount, 64 * 1024):
        path, cfg = h.prepare(service, "enospc", table=mount / "t")
        used = _used_kb(mount)
        subprocess.run(["mount", "-o", f"remount,size={used + headroom}k", str(mount)], check=True)
        rc, last = h.run_pass(cfg, {})
        log = cfg.with_name("pass.log").read_text(errors="replace")
        fired = rc != 0 or "No space left" in log
        subprocess.run(["mount", "-o", "remount,size=65536k", str(mount)], check=True)
        return h.finish(service, "enospc", f"{headroom} KiB free", path, cfg, fired, rc, last)


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def _victim(path: Path, damage: str, rng_choice: object) -> Path:
    """A committed file the action reads: a log file (or, for `delete-base-file`, a base file) named by a completed
    write of the data table."""
    table = HudiTable.open(Storage(), str(path))
    names: set[str] = set()
    for instant in table.timeline().completed_writes():
        md = table.commit_metadata(instant)
        for stats in (md.partition_to_write_stats or {}).values():
            names.update(s.path for s in stats if s.path)
    want_log = damage != "delete-base-file"
    files = sorted(n for n in names if (".log." in n) == want_log and (path / n).exists())
    if not files:
        raise AssertionError(f"no {'log' if want_log else 'base'} file to damage in {path}")
    assert callable(rng_choice)
    return path / str(rng_choice(files))


def damage(victim: Path, kind: str, rng_int: object) -> None:
    assert callable(rng_int)
    data = victim.read_bytes()
    if kind == "truncate":
        victim.write_bytes(data[: int(rng_int(1, max(1, len(data) - 1)))])
    elif kind == "zero-length":
        victim.write_bytes(b"")
    elif kind == "insert-mid-block":
        at = int(rng_int(len(data) // 4, max(len(data) // 4, 3 * len(data) // 4)))
        victim.write_bytes(data[:at] + os.urandom(int(rng_int(1, 64))) + data[at:])
    elif kind == "append":
        victim.write_bytes(data + os.urandom(int(rng_int(1, 64))))
    elif kind == "delete-base-file":
        victim.unlink()
    else:
        raise ValueError(kind)


def _error_class(line: str) -> type[BaseException] | None:
    """The error class a pass printed: `... failed: <kind>: message`, the kind in the words of
    `tableservice.cli.messages.describe`."""
    _, sep, rest = line.partition(" failed: ")
    if not sep:
        _, sep, rest = line.partition(": error: ")
    return kind_class(rest.split(": ", 1)[0]) if sep else None


def damage_trial(h: Harness, service: str) -> TrialResult:
    """Damage one committed file; the pass must stop with a PermanentError naming the file and leave every other
    file as it was (no recovery pass: the table stays damaged)."""
    kind = h.rng.choice(DAMAGES)
    path, cfg = h.prepare(service, "damage")
    victim = _victim(path, kind, h.rng.choice)
    damage(victim, kind, h.rng.randint)
    before = _digests(path)
    files_before = data_files(path)
    rc, _ = h.run_pass(cfg, {})
    log = cfg.with_name("pass.log").read_text(errors="replace")
    failures = [ln for ln in log.splitlines() if " failed: " in ln or ": error: " in ln]
    cls = _error_class(failures[-1]) if failures else None
    after = _digests(path)
    changed = sorted(k for k, v in before.items() if after.get(k) != v)
    new_data = sorted(data_files(path) - files_before)
    findings = Findings(orphans=new_data, pending=[f"changed {c}" for c in changed])
    result = TrialResult(
        service,
        "damage",
        f"{kind} {victim.name}",
        fired=True,
        child_rc=rc,
        child_error=failures[-1] if failures else "",
        recovery_error=None if cls is not None and issubclass(cls, errors.PermanentError) else "no PermanentError",
        findings=findings,
        named_file=any(victim.name in ln for ln in failures),
        unchanged=not changed and not new_data,
        expected_error=cls is not None and issubclass(cls, errors.PermanentError),
    )
    h.results.append(result)
    return result
