"""Building a base file's bloom filter: the compiled Murmur kernel against the numpy path, on the same keys, in one run.

Usage: python -m bench.bloom [--keys 500000] [--rounds 5] [--key-format trip]

The keys: `--keys` record keys of one byte length (`trip`: 17-byte keys like the benchmark tables') or of mixed
lengths (`mixed`: 8 to 40 bytes, grouped by length before hashing), added in one `add_many` call to Hudi's default
filter (DYNAMIC_V0, 60000 entries at fpp 1e-9: 30 hashes a key, rows of 2,587,966 bits; the filter reaches its
100000-entry bound and deals later keys over its two rows), then serialized as the footer stores it. Each round
times both paths back to back (process CPU seconds); the medians and their ratio are printed, and the two filters'
footer strings are compared (they must be equal). The aim: the compiled kernel at least 3x the numpy path.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import pyarrow as pa

from tableservice.hudi.file_group import bloom_kernel
from tableservice.hudi.file_group.bloom import create_bloom_filter


def make_keys(n: int, key_format: str) -> pa.Array:
    if key_format == "trip":
        return pa.array([f"trip-{i:012d}" for i in range(n)], pa.large_string())
    lengths = np.random.default_rng(5).integers(8, 41, size=n)
    return pa.array([f"k{i:x}".ljust(int(w), "-") for i, w in enumerate(lengths)], pa.large_string())


def build(keys: pa.Array) -> tuple[float, str]:
    started = time.process_time()
    bloom = create_bloom_filter()
    bloom.add_many(keys)
    footer = bloom.serialize()
    return time.process_time() - started, footer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--key-format", choices=["trip", "mixed"], default="trip")
    args = parser.parse_args()
    if not bloom_kernel.available():
        print(f"cannot compare: bloom filters are built in {bloom_kernel.status()}", file=sys.stderr)
        return 1
    keys = make_keys(args.keys, args.key_format)
    lib = bloom_kernel._LIB
    compiled: list[float] = []
    numpy: list[float] = []
    build(keys)  # warm both paths' allocations and imports
    for round_ in range(1, args.rounds + 1):
        seconds, compiled_footer = build(keys)
        compiled.append(seconds)
        bloom_kernel._LIB = None
        try:
            seconds, numpy_footer = build(keys)
        finally:
            bloom_kernel._LIB = lib
        numpy.append(seconds)
        if compiled_footer != numpy_footer:
            print(f"round {round_}: the two paths built different filters", file=sys.stderr)
            return 1
        print(f"round {round_}: compiled {compiled[-1] * 1000:.0f} ms, numpy {numpy[-1] * 1000:.0f} ms", flush=True)
    fast, slow = statistics.median(compiled), statistics.median(numpy)
    print(f"keys: {args.keys} ({args.key_format}); {bloom_kernel.status()}")
    print(f"compiled kernel: {fast * 1000:.0f} ms CPU ({fast / args.keys * 1e9:.0f} ns a key, 30 hashes)")
    print(f"numpy path:      {slow * 1000:.0f} ms CPU ({slow / args.keys * 1e9:.0f} ns a key)")
    print(f"speed-up compiled / numpy: {slow / fast:.2f}x (aim >= 3x); footers equal in every round")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
