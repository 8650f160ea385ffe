"""CPU per S3 LIST: pyarrow's client against the native one (`tableservice.storage.s3_list`), side by side
(python -m bench.s3list [--lists 2000] [--files 20]).

A small timeline folder (`--files` instant files and two subfolders, as a table's `.hoodie/timeline/` holds) is put
on a moto server; `Storage.list` of it is then called `--lists` times with each client, in alternating rounds of
`--lists / 4` so that a change in the machine's load falls on both. Measured: this process's CPU (user and system
time of every thread, `getrusage`: moto runs in its own process, so its CPU is not counted) and wall time per LIST.
Two routes:
straight to moto (which closes the connection after every answer: a new TCP connection per LIST) and through the
counting proxy (HTTP/1.1 keep-alive to the client, as in `bench.fleet`; the proxy runs in a child process so its CPU
is not counted either). The machine's `uptime` load is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from dataclasses import replace

import boto3

from tableservice.storage import Storage, StorageOptions
from tests.support.servers import moto_server

BUCKET = "s3list"
FOLDER = f"s3://{BUCKET}/table/.hoodie/timeline"
_PROXY = (
    "import sys; from tests.support.faults.s3_proxy import FaultProxy\n"
    "with FaultProxy(sys.argv[1]) as p:\n"
    "    print(p.endpoint_url, flush=True); sys.stdin.read()\n"
)


def _fill(endpoint: str, files: int) -> None:
    s3 = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="t"
    )
    s3.create_bucket(Bucket=BUCKET)
    key = FOLDER[len(f"s3://{BUCKET}/") :]
    for i in range(files):
        state = ("commit.requested", "inflight", "commit")[i % 3]
        s3.put_object(Bucket=BUCKET, Key=f"{key}/2024050112{i:04d}000.{state}", Body=b"{}" * (i + 1))
    for sub in ("history/a.parquet", "lsm/manifest_1"):
        s3.put_object(Bucket=BUCKET, Key=f"{key}/{sub}", Body=b"x")


def _round(storage: Storage, n: int) -> tuple[float, float, float]:
    """User CPU, system CPU and wall seconds of `n` listings (this process, every thread)."""
    before, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(n):
        storage.list(FOLDER)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime, time.perf_counter() - wall


def measure(endpoint: str, lists: int) -> dict[str, tuple[float, float, float]]:
    """User CPU, system CPU and wall ms per LIST of each client."""
    options = StorageOptions(
        endpoint_url=endpoint, region="us-east-1", access_key_id="testing", secret_access_key="testing"
    )
    clients = {"pyarrow": Storage(replace(options, list_client="pyarrow")), "native": Storage(options)}
    first = {name: s.list(FOLDER) for name, s in clients.items()}  # warm: connections, credentials
    if first["pyarrow"] != first["native"]:
        raise SystemExit("the two listings differ")
    totals = {name: [0.0, 0.0, 0.0] for name in clients}
    step = max(1, lists // 4)
    for _ in range(4):
        for name, storage in clients.items():
            for i, value in enumerate(_round(storage, step)):
                totals[name][i] += value
    done = step * 4
    return {
        name: (user * 1000 / done, system * 1000 / done, wall * 1000 / done)
        for name, (user, system, wall) in totals.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lists", type=int, default=2000)
    parser.add_argument("--files", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    with moto_server() as moto:
        _fill(moto.endpoint_url, args.files)
        proxy = subprocess.Popen(
            [sys.executable, "-c", _PROXY, moto.endpoint_url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert proxy.stdout is not None
            proxied = proxy.stdout.readline().strip()
            routes = {"moto, a connection per LIST": moto.endpoint_url, "proxy, kept alive": proxied}
            print(f"{args.lists} LISTs of a folder of {args.files + 2} entries per client and route")
            print(f"{'route':<30} {'client':<8} {'CPU ms/LIST':>12} {'(user':>7} {'+ sys)':>7} {'wall ms/LIST':>13}")
            for route, endpoint in routes.items():
                got = measure(endpoint, args.lists)
                for name, (user, system, wall) in got.items():
                    print(f"{route:<30} {name:<8} {user + system:>12.3f} {user:>7.3f} {system:>7.3f} {wall:>13.3f}")
                ratio = sum(got["pyarrow"][:2]) / sum(got["native"][:2])
                user_ratio = got["pyarrow"][0] / got["native"][0]
                print(f"{'':<30} {'ratio':<8} {ratio:>11.2f}x  user {user_ratio:.2f}x (pyarrow / native)")
        finally:
            if proxy.stdin is not None:
                proxy.stdin.close()
            proxy.wait(timeout=10)
    print("load:", os.getloadavg())
    return 0


if __name__ == "__main__":
    sys.exit(main())
