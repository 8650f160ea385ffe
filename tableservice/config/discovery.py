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
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from tableservice.errors import FileMissingError
from tableservice.storage import FileInfo, Storage, join
from tableservice.storage.requests import carry_context

_HIDDEN_PREFIXES = (".", "_")
_PROPERTIES = "hoodie.properties"
_BACKUP = "hoodie.properties.backup"
DISCOVERY_THREADS = 16  # object stores answer in parallel: a thousand tables are found in a few seconds


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


def _properties(storage: Storage, folder: str, name: str) -> bytes | None:
    """The table's properties file `name` (one GET on S3: the read is the lookup), or None when absent."""
    try:
        return storage.read_bytes(join(folder, ".hoodie", name))
    except FileMissingError:
        return None


@dataclass(frozen=True)
class _Looked:
    """What one folder turned out to be: a table (with its properties file when read) or the entries below it."""

    table: bool
    properties: bytes | None = None
    entries: tuple[FileInfo, ...] = ()


def _look(storage: Storage, folder: str, listed: bool, known: Collection[str]) -> _Looked:
    """A table already served (`known`) is taken as it is: no request. Otherwise its `hoodie.properties` is read
    first (a table costs that one GET, and its name comes with it), then the folder is listed (`listed`: above
    `max_depth`) where the backup of a properties file being rewritten shows it is a table all the same."""
    if folder in known:
        return _Looked(True)
    found = _properties(storage, folder, _PROPERTIES)
    if found is not None:
        return _Looked(True, found)
    if not listed:
        return _Looked(_properties(storage, folder, _BACKUP) is not None)
    entries = tuple(storage.list(folder))
    if any(e.is_dir and e.name == ".hoodie" for e in entries) and _properties(storage, folder, _BACKUP) is not None:
        return _Looked(True)
    return _Looked(False, entries=entries)


def discover_tables(
    storage: Storage,
    root: str,
    max_depth: int = 3,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    *,
    known: Collection[str] = (),
    properties: dict[str, bytes] | None = None,
) -> list[str]:
    """Locations of the Hudi tables under `root` (root itself at depth 0), sorted.

    Folders down to `max_depth` levels below `root` are examined; a table at depth `max_depth` is found
    (by a lookup of its properties file) but nothing below that depth is listed. An absent root finds nothing.
    `known`: tables found before (served now), taken without a request while their parent still lists them.
    `properties`: filled with each table's `hoodie.properties` as read here (its name, without a second read).
    The folders of one level are looked at by up to `DISCOVERY_THREADS` threads.
    """
    root = root.rstrip("/") if root not in ("/",) else root
    found: list[str] = []
    level: list[tuple[str, str]] = [(root, "")]
    known = frozenset(known)
    with ThreadPoolExecutor(DISCOVERY_THREADS, thread_name_prefix="discovery") as pool:
        for depth in range(max_depth + 1):
            look = carry_context(partial(_look, storage, listed=depth < max_depth, known=known))
            looked = list(pool.map(look, [folder for folder, _ in level])) if len(level) > 1 else [look(level[0][0])]
            next_level: list[tuple[str, str]] = []
            for (folder, rel), what in zip(level, looked, strict=True):
                if what.table:
                    if _selected(rel, include):
                        found.append(folder)
                        if properties is not None and what.properties is not None:
                            properties[folder] = what.properties
                    continue
                for entry in sorted(what.entries, key=lambda e: e.name):
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
