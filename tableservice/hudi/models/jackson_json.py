"""JSON text exactly as Jackson's default pretty printer writes it (Hudi's v6 commit metadata files).

Jackson's `DefaultPrettyPrinter`: objects put each entry on its own line, indented two spaces per object
nesting level, as `"key" : value`; arrays stay on one line as `[ a, b ]` and do not add a nesting level;
empty containers are `{ }` and `[ ]`; no trailing newline. Strings escape `"` and `\\`, `\\b \\t \\n \\f \\r` by
letter and other control characters as `\\u00XX` (upper-case hex); other characters are written as they are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def jackson_string(text: str) -> str:
    out = ['"']
    for ch in text:
        esc = _SHORT_ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def java_double(value: float) -> str:
    """`Double.toString`: plain notation for 1e-3 <= |x| < 1e7, else `d.dddE±n`, shortest round-trip digits."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e7:
        text = repr(value)
        return text if ("." in text or "e" in text) else text + ".0"
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int)
    digit_text = "".join(str(d) for d in digits).rstrip("0") or "0"
    sci_exp = exponent + len(digits) - 1
    mantissa = digit_text[0] + "." + (digit_text[1:] or "0")
    return ("-" if sign else "") + f"{mantissa}E{sci_exp}"


def jackson_pretty(value: Any) -> str:
    """`value` (dicts, lists/tuples, str, int, float, bool, None) as Jackson's pretty printer writes it."""
    out: list[str] = []
    _write(value, 0, out)
    return "".join(out)


def _write(value: Any, nesting: int, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(java_double(value))
    elif isinstance(value, str):
        out.append(jackson_string(value))
    elif isinstance(value, Mapping):
        if not value:
            out.append("{ }")
            return
        out.append("{")
        for index, (key, item) in enumerate(value.items()):
            if index:
                out.append(",")
            out.append("\n" + "  " * (nesting + 1))
            out.append(jackson_string(str(key)))
            out.append(" : ")
            _write(item, nesting + 1, out)
        out.append("\n" + "  " * nesting + "}")
    elif isinstance(value, Sequence):
        if not value:
            out.append("[ ]")
            return
        out.append("[ ")
        for index, item in enumerate(value):
            if index:
                out.append(", ")
            _write(item, nesting, out)
        out.append(" ]")
    else:
        raise TypeError(f"cannot write {type(value).__name__} as JSON")
