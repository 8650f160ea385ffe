"""Finding Hudi tables under a root folder (the `discovery` section of the configuration).

A folder is a table when it holds `.hoodie/hoodie.properties` (or, while Hudi rewrites the properties,
`.hoodie/hoodie.properties.backup`). The search goes level by level with one listing per folder, never
descends into a table (its partitions are not tables) and skips hidden folders: names starting with `.` or
`_`, as Hadoop does (`_temporary`, `.spark-staging`...).

Patterns are globs on the path relative to the root: `*` and `?` stay within one folder name, `**` spans
folders (`**/tmp_*` matches `tmp_x` at any depth). `include` selects tables (all when empty); a folder or
table whose relative path matches an `exclude` pattern is skipped with everything under it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from tableservice.storage import Storage, join

_HIDDEN_PREFIXES = (".", "_")
_PROPERTIES = ("hoodie.properties", "hoodie.properties.backup")


@functools.lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a glob on `/`-separated relative paths; raises re.error when the pattern is malformed."""
    out = []
    i = 0
    text = pattern.strip().strip("/")
    while i < len(text):
        c = text[i]
        if text.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif text.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = text.find("]", i + 2 if text.startswith("[!", i) or text.startswith("[]", i) else i + 1)
            if end < 0:
                raise re.error(f"unterminated '[' in {pattern!r}")
            body = text[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out))


def _matches(rel: str, patterns: Sequence[str]) -> bool:
    return any(glob_regex(p).fullmatch(rel) for p in patterns)


def _is_table(storage: Storage, folder: str) -> bool:
    return any(storage.info(join(folder, ".hoodie", name)) is not None for name in _PROPERTIES)


def discover_tables(
    storage: Storage,
    root: str,
    max_depth: int = 3,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> list[str]:
    """Locations of the Hudi tables under `root` (root itself at depth 0), sorted.

    Folders down to `max_depth` levels below `root` are examined; a table at depth `max_depth` is found
    (by a lookup of its properties file) but nothing below that depth is listed. An absent root finds nothing.
    """
    root = root.rstrip("/") if root not in ("/",) else root
    found: list[str] = []
    level: list[tuple[str, str]] = [(root, "")]
    for depth in range(max_depth + 1):
        next_level: list[tuple[str, str]] = []
        for folder, rel in level:
            if depth == max_depth:
                if _is_table(storage, folder) and _selected(rel, include):
                    found.append(folder)
                continue
            entries = storage.list(folder)
            if any(e.is_dir and e.name == ".hoodie" for e in entries) and _is_table(storage, folder):
                if _selected(rel, include):
                    found.append(folder)
                continue
            for entry in sorted(entries, key=lambda e: e.name):
                if not entry.is_dir or entry.name.startswith(_HIDDEN_PREFIXES):
                    continue
                child_rel = f"{rel}/{entry.name}" if rel else entry.name
                if _matches(child_rel, exclude):
                    continue
                next_level.append((join(folder, entry.name), child_rel))
        level = next_level
        if not level:
            break
    return sorted(found)


def _selected(rel: str, include: Sequence[str]) -> bool:
    return not include or rel == "" or _matches(rel, include)
