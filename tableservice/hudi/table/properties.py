"""Java `.properties` text: parsing and writing as `java.util.Properties.store` does.

Hudi keeps `hoodie.properties` in this format; values such as the create schema contain `:` and `=`, which
Java escapes with a backslash. Unknown keys must survive a rewrite, so parsing keeps insertion order.
"""

from __future__ import annotations

from collections.abc import Mapping

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> list[str]:
    """Join continuation lines (odd number of trailing backslashes) and drop comments and blanks."""
    out: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if pending is None and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        continued = trailing % 2 == 1
        body = line[:-1] if continued else line
        pending = body if pending is None else pending + body
        if not continued:
            out.append(pending)
            pending = None
    if pending is not None:
        out.append(pending)
    return out


def _unescape(s: str) -> str:
    out: list[str] = []
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "u" and i + 6 <= n:
            try:
                out.append(chr(int(s[i + 2 : i + 6], 16)))
                i += 6
                continue
            except ValueError:
                pass
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    # Java escapes characters outside the BMP as two UTF-16 surrogates.
    return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16")


def _split_key_value(line: str) -> tuple[str, str]:
    i = 0
    n = len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=: \t\f":
            break
        i += 1
    key = line[:i]
    rest = line[i:]
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest)


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java properties text into an ordered dict (later duplicates win, as in Java)."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_key_value(line)
        props[key] = value
    return props


def _escape(s: str, *, is_key: bool) -> str:
    out: list[str] = []
    for idx, c in enumerate(s):
        if c == " " and (is_key or idx == 0):
            out.append("\\ ")
        elif c == "\\":
            out.append("\\\\")
        elif c == "\t":
            out.append("\\t")
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\f":
            out.append("\\f")
        elif c in "=:#!":
            out.append("\\" + c)
        elif ord(c) > 0xFFFF:
            units = c.encode("utf-16-be")
            out.append(f"\\u{int.from_bytes(units[:2]):04X}\\u{int.from_bytes(units[2:]):04X}")
        elif ord(c) < 0x20 or ord(c) > 0x7E:
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return "".join(out)


def format_properties(props: Mapping[str, str], comments: list[str]) -> str:
    """Properties text as Java's `Properties.store(OutputStream, ...)` writes it (ISO-8859-1 safe)."""
    lines = [f"#{c}" for c in comments]
    lines.extend(f"{_escape(k, is_key=True)}={_escape(v, is_key=False)}" for k, v in props.items())
    return "\n".join(lines) + "\n"
