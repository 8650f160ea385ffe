"""Direct markers and heartbeats: what a writer leaves while an attempt runs.

Markers: `.hoodie/.temp/<instant>/<partition>/<file name>.marker.<CREATE|MERGE|APPEND>` name every data file
an attempt creates, so that a rollback can delete exactly those files. They are removed after the commit.

Heartbeats: the empty file `.hoodie/.heartbeat/<instant>`, rewritten every interval while the writer lives.
A writer is considered dead when the file is missing or older than interval × tolerable misses.
"""

from __future__ import annotations

import enum
import threading
import time

from tableservice.hudi.file_group.filenames import parse_base_file_name, parse_log_file_name
from tableservice.storage import Storage, join
from tableservice.storage.requests import carry_context

MARKER_SUFFIX = ".marker."
DEFAULT_HEARTBEAT_INTERVAL_MS = 60_000
DEFAULT_TOLERABLE_MISSES = 2


class MarkerType(enum.StrEnum):
    CREATE = "CREATE"
    MERGE = "MERGE"
    APPEND = "APPEND"


def marker_folder(base_path: str, instant_time: str) -> str:
    return join(base_path, ".hoodie", ".temp", instant_time)


def create_marker(
    storage: Storage, base_path: str, instant_time: str, partition: str, file_name: str, marker_type: MarkerType
) -> str:
    path = join(marker_folder(base_path, instant_time), partition, f"{file_name}{MARKER_SUFFIX}{marker_type.value}")
    storage.write_bytes(path, b"")
    return path


def _parse_marker(rel: str) -> tuple[str, str, MarkerType] | None:
    partition, _, name = rel.strip().rpartition("/")
    if MARKER_SUFFIX not in name:
        return None
    file_name, _, kind = name.rpartition(MARKER_SUFFIX)
    if kind not in MarkerType.__members__:
        return None
    if parse_base_file_name(file_name) is None and parse_log_file_name(file_name) is None:
        return None
    return (partition, file_name, MarkerType(kind))


def list_marked_files(storage: Storage, base_path: str, instant_time: str) -> list[tuple[str, str, MarkerType]]:
    """(partition, data file name, marker type) for every marker of the attempt: direct markers (one empty file
    per data file) and timeline-server markers (`MARKERS<n>` files listing marker names, one per line)."""
    folder = marker_folder(base_path, instant_time)
    out: set[tuple[str, str, MarkerType]] = set()
    for fi in storage.walk_files(folder):
        rel = fi.location[len(folder.rstrip("/")) + 1 :]
        if "/" not in rel and rel == "ATTEMPT":
            continue
        if "/" not in rel and rel.startswith("MARKERS") and rel != "MARKERS.type":
            for line in storage.read_bytes(fi.location).decode("utf-8", "replace").splitlines():
                parsed = _parse_marker(line)
                if parsed is not None:
                    out.add(parsed)
            continue
        parsed = _parse_marker(rel)
        if parsed is not None:
            out.add(parsed)
    return sorted(out)


def delete_markers(storage: Storage, base_path: str, instant_time: str) -> None:
    storage.delete_dir(marker_folder(base_path, instant_time))


def heartbeat_path(base_path: str, instant_time: str) -> str:
    return join(base_path, ".hoodie", ".heartbeat", instant_time)


def heartbeat_expired(
    storage: Storage,
    base_path: str,
    instant_time: str,
    *,
    interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    now_ms: int | None = None,
) -> bool:
    info = storage.info(heartbeat_path(base_path, instant_time))
    if info is None:
        return True
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    return now - info.mtime_ms > interval_ms * tolerable_misses


class Heartbeat:
    """Keeps `.hoodie/.heartbeat/<instant>` fresh from a daemon thread until stopped."""

    def __init__(
        self, storage: Storage, base_path: str, instant_time: str, interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    ) -> None:
        self.storage = storage
        self.path = heartbeat_path(base_path, instant_time)
        self.interval_s = interval_ms / 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Heartbeat:
        self.storage.touch(self.path)
        self._thread = threading.Thread(target=carry_context(self._run), name=f"heartbeat-{self.path}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.storage.touch(self.path)
            except Exception:  # a missed beat is tolerated; the next one retries
                continue

    def stop(self, *, delete: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if delete:
            self.storage.delete(self.path)
