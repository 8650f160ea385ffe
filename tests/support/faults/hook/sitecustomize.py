"""The crash hook of the fault harness, loaded by every Python process of a trial (the command, and Spark's Python
workers, which inherit its environment) because the harness puts this folder first on PYTHONPATH.

With `TABLESERVICE_FAULT_COUNTER` set, every storage write (write_bytes, create_if_absent, open_output_stream,
delete, delete_dir, rename) of any process of the trial takes the next number from that file (under an exclusive
lock). With `TABLESERVICE_FAULT_KILL_AT=N` the process group is killed with SIGKILL at write N:
- `TABLESERVICE_FAULT_KILL_MODE=before`: before the write happens;
- `torn`: a whole-file write or create has put its temp file (`.tmp-*`) beside the target but not yet renamed or
  linked it, as a crash inside `Storage.write_bytes` or `create_if_absent` leaves it (other writes: as `before`);
- `after`: after the write, plus `TABLESERVICE_FAULT_KILL_DELAY_MS` (the process runs on meanwhile: streams are
  half-written, Spark tasks are mid-way);
- `zk`: the ZooKeeper server (pid in `TABLESERVICE_FAULT_ZK_PID`) gets SIGKILL (`TABLESERVICE_FAULT_ZK_SIGNAL=KILL`,
  the server stops) or SIGSTOP (`STOP`, a hung server: sessions expire) before the write, and the pass goes on.
Without the variables nothing is patched.
"""

from __future__ import annotations

import os

if os.environ.get("TABLESERVICE_FAULT_COUNTER"):
    from tests.support.faults.crash_points import install

    install()
