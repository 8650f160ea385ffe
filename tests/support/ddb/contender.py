"""A separate process using tableservice's DynamoDB lock, for tests/test_lock_dynamodb.py.

    contender.py contend ENDPOINT TABLE KEY LEASE_MS SECONDS OUT   take and release the lock repeatedly
    contender.py hold ENDPOINT TABLE KEY LEASE_MS SECONDS OUT      take it once and report until it is lost

Lines written to OUT (flushed one by one), times are wall-clock unix seconds:
    contend: `enter <t>`, `exit <t>` around each critical section (exit: the time of the check at its end),
             `lost <t>` if that check found the handle lost, `done`
    hold:    `acquired <t> <owner>`, then `held <t>` every 50 ms while the handle says it holds the lock,
             `lost <t>` at the first check that finds it lost (t: taken just before each check), `released <t>`
Credentials come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
"""

from __future__ import annotations

import random
import sys
import time
from typing import TextIO

from tableservice.config.locks import LockSettings
from tableservice.locks.dynamodb import DynamoDBLockProvider


def _line(out: TextIO, text: str) -> None:
    out.write(text + "\n")
    out.flush()


def main(argv: list[str]) -> int:
    mode, endpoint, table, key, lease_ms, seconds, path = argv
    settings = LockSettings.model_validate(
        {
            "hoodie.write.lock.provider": "dynamodb",
            "hoodie.write.lock.dynamodb.table": table,
            "hoodie.write.lock.dynamodb.partition_key": key,
            "hoodie.write.lock.dynamodb.region": "us-east-1",
            "hoodie.write.lock.wait_time_ms": int(lease_ms),
        }
    )
    provider = DynamoDBLockProvider(settings, endpoint_url=endpoint)
    lock = provider.table_lock("ignored", "/ignored")
    deadline = time.monotonic() + float(seconds)
    with open(path, "w", encoding="utf-8") as out:
        if mode == "contend":
            while time.monotonic() < deadline:
                handle = lock.acquire(timeout_s=60.0)
                _line(out, f"enter {time.time():.6f}")
                time.sleep(random.uniform(0.05, 0.25))
                checked = time.time()  # the section ends at the holder's last check: a lease lock covers the
                if handle.lost:  # holder up to its last check that the lease still holds, plus the safety margin
                    _line(out, f"lost {checked:.6f}")
                _line(out, f"exit {checked:.6f}")
                lock.release(handle)
                time.sleep(random.uniform(0.05, 0.3))
            _line(out, "done")
        elif mode == "hold":
            handle = lock.acquire(timeout_s=30.0)
            _line(out, f"acquired {time.time():.6f} {handle.owner}")
            while time.monotonic() < deadline:
                before = time.time()  # the check below happens at or after this time
                if handle.lost:
                    _line(out, f"lost {before:.6f}")
                    break
                _line(out, f"held {before:.6f}")
                time.sleep(0.05)
            lock.release(handle)
            _line(out, f"released {time.time():.6f}")
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    provider.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
