"""Guards for readers of writer schemas that a file embeds (log blocks, archived instants, metadata-table records,
Avro container files): such a schema is untrusted input, and a reader checks it before decoding with it.

- `zero_width_array(schema) -> str | None`: where the schema has an array whose items take no bytes.
"""

from __future__ import annotations

from typing import Any


def zero_width_array(avro_schema: Any) -> str | None:
    """Where an Avro schema (JSON form, as a file embeds it) has an array whose items take no bytes (null, a record
    of such fields, a zero-size fixed), or None. A reader of such an array loops as often as the count on disk says,
    without reading a byte: a damaged count of 2^62 never ends. No Hudi schema has one, so readers refuse them."""
    named: dict[str, Any] = {}
    try:
        _collect_named(avro_schema, named)
        return _find_zero_width_array(avro_schema, named, "")
    except RecursionError:
        return "a schema nested too deeply to check"


def _collect_named(s: Any, named: dict[str, Any]) -> None:
    if isinstance(s, list):
        for branch in s:
            _collect_named(branch, named)
        return
    if not isinstance(s, dict):
        return
    t, name, namespace = s.get("type"), s.get("name"), s.get("namespace")
    if t in ("record", "error", "fixed", "enum") and isinstance(name, str):
        named[name] = s
        named[name.rsplit(".", 1)[-1]] = s
        if isinstance(namespace, str) and namespace:
            named[f"{namespace}.{name}"] = s
    if isinstance(t, (dict, list)):
        _collect_named(t, named)
    fields = s.get("fields")
    if isinstance(fields, list):
        for f in fields:
            if isinstance(f, dict):
                _collect_named(f.get("type"), named)
    for key in ("items", "values"):
        _collect_named(s.get(key), named)


def _zero_width(s: Any, named: dict[str, Any], open_records: set[int]) -> bool:
    if isinstance(s, str):
        if s == "null":
            return True
        target = named.get(s)
        return target is not None and _zero_width(target, named, open_records)
    if not isinstance(s, dict):
        return False  # unions start with a branch index: at least one byte
    t = s.get("type")
    if isinstance(t, (dict, list)):
        return _zero_width(t, named, open_records)
    if t == "null":
        return True
    if t == "fixed":
        return s.get("size") == 0
    if t in ("record", "error"):
        if id(s) in open_records:
            return False
        open_records.add(id(s))
        try:
            fields = s.get("fields")
            items = fields if isinstance(fields, list) else []
            return all(isinstance(f, dict) and _zero_width(f.get("type"), named, open_records) for f in items)
        finally:
            open_records.discard(id(s))
    if isinstance(t, str) and t in named and named[t] is not s:
        return _zero_width(named[t], named, open_records)
    return False


def _find_zero_width_array(s: Any, named: dict[str, Any], where: str) -> str | None:
    if isinstance(s, list):
        for branch in s:
            found = _find_zero_width_array(branch, named, where)
            if found is not None:
                return found
        return None
    if not isinstance(s, dict):
        return None
    t = s.get("type")
    if t == "array" and _zero_width(s.get("items"), named, set()):
        return f"array {where or '(top level)'} of items that take no bytes"
    children: list[tuple[Any, str]] = [(t, where)] if isinstance(t, (dict, list)) else []
    fields = s.get("fields")
    if isinstance(fields, list):
        children += [(f.get("type"), f"{where}.{f.get('name')}".lstrip(".")) for f in fields if isinstance(f, dict)]
    children += [(s.get(key), where) for key in ("items", "values") if key in s]
    for child, at in children:
        found = _find_zero_width_array(child, named, at)
        if found is not None:
            return found
    return None
