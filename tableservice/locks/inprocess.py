"""The in-process lock: one `threading.Lock` per table base path, shared by everything in this process
(the embedded default; Hudi's InProcessLockProvider plays the same role for writers in one JVM)."""

from __future__ import annotations

import os
import threading
import time

from tableservice.locks.base import LockHandle, LockProvider, TableLock, lock_timeout

_REGISTRY: dict[str, threading.Lock] = {}
_REGISTRY_GUARD = threading.Lock()
_HOLDERS: dict[str, tuple[str, float]] = {}


def _lock_for(key: str) -> threading.Lock:
    with _REGISTRY_GUARD:
        lock = _REGISTRY.get(key)
        if lock is None:
            lock = _REGISTRY[key] = threading.Lock()
        return lock


class InProcessTableLock(TableLock):
    def __init__(self, key: str) -> None:
        self.key = key
        self._lock = _lock_for(key)

    def acquire(self, timeout_s: float) -> LockHandle:
        if not self._lock.acquire(timeout=max(0.0, timeout_s)):
            raise lock_timeout(f"not acquired within {timeout_s:.1f}s", self.key)
        owner = f"pid-{os.getpid()}-thread-{threading.get_ident()}"
        _HOLDERS[self.key] = (owner, time.time())
        return LockHandle(self.key, owner)

    def release(self, handle: LockHandle) -> None:
        _HOLDERS.pop(self.key, None)
        self._lock.release()

    def holder(self) -> tuple[str, float] | None:
        return _HOLDERS.get(self.key)


class InProcessLockProvider(LockProvider):
    name = "in-process"

    def table_lock(self, table_name: str, base_path: str) -> TableLock:
        return InProcessTableLock(base_path.rstrip("/"))

    def lease(self, table_name: str, base_path: str, name: str) -> TableLock:
        return InProcessTableLock(f"lease:{base_path.rstrip('/')}:{name}")
