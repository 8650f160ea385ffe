"""The lock interface the service and the write client use."""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tableservice.errors import LockError, LockLostError


@dataclass
class LockHandle:
    """A held lock. `lost` turns true when the provider finds the lock gone (session expiry, lease taken);
    whoever holds the handle must then abandon what it was about to write."""

    key: str
    owner: str
    acquired_at: float = field(default_factory=time.monotonic)
    lost: bool = False

    def check(self) -> None:
        if self.lost:
            raise LockLostError(f"lock {self.key!r} was lost while held by {self.owner}")


class TableLock(abc.ABC):
    """One lock (one table, or one executor lease)."""

    key: str

    @abc.abstractmethod
    def acquire(self, timeout_s: float) -> LockHandle:
        """Block until held or `timeout_s` passes (LockError)."""

    @abc.abstractmethod
    def release(self, handle: LockHandle) -> None: ...

    def holder(self) -> tuple[str, float] | None:
        """Who holds the lock and since when (unix seconds), where the backend can tell."""
        return None

    @contextmanager
    def hold(
        self,
        timeout_s: float,
        on_acquired: Callable[[float], None] | None = None,
        on_released: Callable[[float], None] | None = None,
    ) -> Iterator[LockHandle]:
        """Hold the lock for a `with` block; the callbacks receive wait and hold seconds (for metrics)."""
        started = time.monotonic()
        handle = self.acquire(timeout_s)
        if on_acquired is not None:
            on_acquired(time.monotonic() - started)
        try:
            yield handle
            handle.check()
        finally:
            held = time.monotonic() - handle.acquired_at
            self.release(handle)
            if on_released is not None:
                on_released(held)


class LockProvider(abc.ABC):
    """Makes the locks of tables (keyed by base path or Hudi's lock key) and executor leases."""

    name: str = "lock"

    @abc.abstractmethod
    def table_lock(self, table_name: str, base_path: str) -> TableLock: ...

    def lease(self, table_name: str, base_path: str, name: str) -> TableLock:
        """An executor lease: who runs the action `name` (e.g. `compaction-<instant>`) of a table. Held for the
        whole action, renewed by the backend (ZooKeeper session, DynamoDB heartbeat); separate from the table
        lock Hudi writers take, so holding it never blocks a writer."""
        raise NotImplementedError(f"{type(self).__name__} has no executor leases")

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


def lock_timeout(message: str, key: str) -> LockError:
    return LockError(f"{message}: lock {key!r}")
