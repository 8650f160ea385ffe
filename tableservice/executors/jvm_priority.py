"""The driver JVM's scheduling priority under a local master, where it shares the machine's cores with the Python
workers that do an action's work. Linux only (it reads /proc); elsewhere nothing changes."""

from __future__ import annotations

import os


def lower_priority(pid: int, nice: int) -> int:
    """Raise every thread of `pid` to at least `nice` (threads the JVM starts later inherit it from the thread that
    starts them); returns how many threads changed. Raising a nice value needs no privilege."""
    changed = 0
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for name in threads:
        tid = int(name)
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
                changed += 1
        except OSError:
            continue  # the thread ended meanwhile
    return changed
