"""Command-line entry point (filled in as capabilities land)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("tableservice: no command yet", file=sys.stderr)
    return 2
