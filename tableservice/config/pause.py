"""Pausing and resuming a table by editing its entry in the configuration file in place.

`tableservice pause` adds two lines to the table's entry under `tables:` (`paused: true` and `paused_reason:
"..."`); `resume` removes them. Nothing else in the file changes: comments, order, spacing and quoting stay as they
were, and pause followed by resume gives the file back byte for byte. The edit is line-based (no round-trip YAML
library is a dependency), so it is checked before it is written: the edited text is parsed and validated, and the
configuration it gives must equal the old one with only that entry's `paused` and `paused_reason` changed. A layout
the editor does not handle (a flow-style entry `- {uri: ...}`, a block-scalar reason) is refused with the file
untouched, saying to edit it by hand. The file is replaced atomically (a temporary file beside it, then a rename),
keeping its permissions; the daemon reloads it when its modification time changes.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass

from tableservice.config.load import parse_config
from tableservice.config.model import DaemonConfig, TableEntry
from tableservice.errors import ConfigError

PAUSE_KEYS = ("paused", "paused_reason")
_TABLES = re.compile(r"^tables\s*:\s*(#.*)?$")
_ITEM = re.compile(r"^(\s*)-(\s+|$)")


@dataclass(frozen=True)
class PauseEdit:
    table: TableEntry  # the entry as it is after the edit
    changed: bool  # False when the entry already was in the state asked for


def _code(line: str) -> bool:
    """Whether the line holds YAML (not blank, not only a comment)."""
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _entry_block(lines: list[str], index: int, path: str) -> tuple[int, int, int]:
    """(first line, end line (exclusive), key indentation) of the `index`-th item of the top-level `tables` list."""
    start = next((i for i, line in enumerate(lines) if _TABLES.match(line)), None)
    if start is None:
        raise ConfigError("no block-style `tables:` list at the top level: edit the file by hand", path=path)
    items: list[tuple[int, int]] = []  # (line, dash column)
    dash: int | None = None
    end = len(lines)
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if not _code(line):
            continue
        m = _ITEM.match(line)
        if m is not None and (dash is None or len(m.group(1)) == dash):
            dash = len(m.group(1))
            items.append((i, dash))
        elif dash is None or _indent(line) <= dash:
            end = i
            break
    if index >= len(items):
        raise ConfigError(f"table entry {index} not found under `tables:`: edit the file by hand", path=path)
    first, column = items[index]
    last = items[index + 1][0] if index + 1 < len(items) else end
    while last > first + 1 and not _code(lines[last - 1]):  # trailing blank lines and comments stay outside
        last -= 1
    after_dash = lines[first][column + 1 :]
    key_indent = column + 1 + _indent(after_dash)
    if after_dash.strip().startswith("{"):
        raise ConfigError("the table's entry is written in flow style (`- {...}`): edit the file by hand", path=path)
    return first, last, key_indent


def _key_of(line: str, key_indent: int, first: bool) -> str | None:
    """The mapping key a line of an entry starts at the entry's key indentation, else None."""
    text = line[key_indent:] if first or _indent(line) == key_indent else ""
    m = re.match(r"([A-Za-z_][\w.]*)\s*:(\s|$)", text)
    return m.group(1) if m else None


def edit_pause(text: str, index: int, paused: bool, reason: str | None, *, path: str) -> str:
    """`text` with the `index`-th table entry's pause lines removed, and, when `paused`, written anew."""
    lines = text.splitlines(keepends=True)
    first, last, key_indent = _entry_block(lines, index, path)
    block: list[str] = []
    for i in range(first, last):
        key = _key_of(lines[i], key_indent, i == first)
        if key in PAUSE_KEYS:
            if i == first:
                raise ConfigError(f"`{key}` opens the table's entry: edit the file by hand", path=path)
            value = lines[i].split(":", 1)[1].strip()
            if value[:1] in ("|", ">") or (value[:1] in ("'", '"') and not value.rstrip().endswith(value[0])):
                raise ConfigError(f"`{key}` spans several lines: edit the file by hand", path=path)
            continue
        block.append(lines[i])
    if block and not block[-1].endswith("\n"):
        block[-1] += "\n"
    if paused:
        pad = " " * key_indent
        block.append(f"{pad}paused: true\n")
        if reason:
            block.append(f"{pad}paused_reason: {json.dumps(reason, ensure_ascii=False)}\n")
    return "".join(lines[:first] + block + lines[last:])


def _find(config: DaemonConfig, table: str, path: str) -> int:
    for i, entry in enumerate(config.tables):
        if table in (entry.name, entry.uri) or config.table(table) is entry:
            return i
    raise ConfigError(
        f"table {table!r} is not listed under `tables:` (a discovered table is paused by listing it with "
        "`- uri: ...` first)",
        path=path,
    )


def set_paused(path: str, table: str, paused: bool, reason: str | None = None) -> PauseEdit:
    """Pause (`paused`) or resume the table named `table` (its `name` or `uri`) in the configuration file at the
    local `path`; the file is rewritten only when the entry changes (see the module docstring)."""
    if "://" in path:
        raise ConfigError("pause and resume edit a local configuration file only", path=path)
    if reason is not None and "\n" in reason:
        raise ConfigError("the pause reason must be one line", path=path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    base_dir = os.path.dirname(os.path.abspath(path))
    old = parse_config(text, source=path, base_dir=base_dir)
    index = _find(old, table, path)
    entry = old.tables[index]
    wanted = entry.model_copy(update={"paused": paused, "paused_reason": reason if paused else None})
    if wanted == entry:
        return PauseEdit(entry, changed=False)
    new_text = edit_pause(text, index, paused, reason if paused else None, path=path)
    new = parse_config(new_text, source=path, base_dir=base_dir)
    expected = old.model_copy(update={"tables": [*old.tables[:index], wanted, *old.tables[index + 1 :]]})
    if new != expected:
        raise ConfigError(
            "editing the table's entry in place would change more than its pause: file left as it was, edit it by hand",
            path=path,
        )
    _replace(path, new_text)
    return PauseEdit(new.tables[index], changed=True)


def _replace(path: str, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path` (keeping its mode)."""
    folder = os.path.dirname(os.path.abspath(path))
    mode = os.stat(path).st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=".tableservice-", suffix=".yaml", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
