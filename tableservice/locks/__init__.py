"""Locks shared with Hudi writers.

A `TableLock` guards one table's short critical sections (instant generation and plan write; conflict check and
completed-instant write), never a whole Spark job. Providers: in-process (the embedded default, for writers in
the same process), and (later) ZooKeeper and DynamoDB speaking the protocols Hudi's lock providers use.
"""

from tableservice.locks.base import LockHandle, LockProvider, TableLock
from tableservice.locks.inprocess import InProcessLockProvider

__all__ = ["InProcessLockProvider", "LockHandle", "LockProvider", "TableLock"]
