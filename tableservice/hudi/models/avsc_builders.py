"""Small builders for Avro schemas in the exact JSON form Hudi's Java-generated classes embed in files.

Hudi's Avro classes are generated with `stringType=String`, so every string schema carries
`"avro.java.string": "String"` and every map schema carries it too (for its keys). Java's `Schema.toString()`
writes keys in a fixed order: records `type, name, namespace, doc, fields`; fields `name, type, doc, default`;
maps `type, values, avro.java.string, <other props>`; arrays `type, items, <other props>`. Nested records in the
same namespace carry no `namespace`; a named type is defined inline at its first use and referred to by name
afterwards. The builders below keep that order so `schema_to_json` reproduces the embedded text byte for byte.
"""

from __future__ import annotations

import json
from typing import Any, Final

Schema = Any
"""An Avro schema as parsed JSON: a type name, a union list or a dict."""

NAMESPACE: Final = "org.apache.hudi.avro.model"

_NO_DEFAULT: Final = object()


def string() -> dict[str, Any]:
    """A Java-generated string schema."""
    return {"type": "string", "avro.java.string": "String"}


def opt(schema: Schema) -> list[Schema]:
    """The union `["null", schema]`."""
    return ["null", schema]


def array(items: Schema, *, props: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "array", "items": items}
    if props:
        out.update(props)
    return out


def map_of(values: Schema, *, props: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "map", "values": values, "avro.java.string": "String"}
    if props:
        out.update(props)
    return out


def field(name: str, schema: Schema, *, doc: str | None = None, default: Any = _NO_DEFAULT) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "type": schema}
    if doc is not None:
        out["doc"] = doc
    if default is not _NO_DEFAULT:
        out["default"] = default
    return out


def record(name: str, fields: list[dict[str, Any]], *, doc: str | None = None) -> dict[str, Any]:
    """A nested record (same namespace as its parent, so no `namespace` key)."""
    out: dict[str, Any] = {"type": "record", "name": name}
    if doc is not None:
        out["doc"] = doc
    out["fields"] = fields
    return out


def top_level(rec: dict[str, Any]) -> dict[str, Any]:
    """`rec` as a top-level schema: namespace added after the name, later repeats of named types turned into
    references (Java's inline-first-use rule)."""
    out: dict[str, Any] = {"type": "record", "name": rec["name"], "namespace": NAMESPACE}
    for key, value in rec.items():
        if key not in ("type", "name"):
            out[key] = value
    deduped: dict[str, Any] = dedupe_named_types(out)
    return deduped


# --- common field shapes ------------------------------------------------------------------------------


def opt_str(name: str, *, doc: str | None = None) -> dict[str, Any]:
    return field(name, opt(string()), doc=doc, default=None)


def opt_prim(name: str, prim: str, *, doc: str | None = None) -> dict[str, Any]:
    return field(name, opt(prim), doc=doc, default=None)


def version_field(*, doc: str | None = None) -> dict[str, Any]:
    return field("version", ["int", "null"], doc=doc, default=1)


def string_map(props: dict[str, Any] | None = None) -> dict[str, Any]:
    return map_of(string(), props=props)


def extra_metadata_field(*, map_props: dict[str, Any] | None = None) -> dict[str, Any]:
    return field("extraMetadata", opt(string_map(map_props)), default=None)


def string_array(props: dict[str, Any] | None = None) -> dict[str, Any]:
    return array(string(), props=props)


# --- whole-schema helpers --------------------------------------------------------------------------------


def dedupe_named_types(schema: Schema) -> Schema:
    """Replace every repeated definition of a named type by a reference to its name.

    Raises ValueError when two definitions of the same name differ (the schema would be invalid).
    """
    seen: dict[str, str] = {}

    def walk(node: Schema) -> Schema:
        if isinstance(node, list):
            return [walk(x) for x in node]
        if not isinstance(node, dict):
            return node
        kind = node.get("type")
        if kind in ("record", "enum", "fixed"):
            name = node["name"]
            text = json.dumps(_strip_namespace(node), sort_keys=True)
            if name in seen:
                if seen[name] != text:
                    raise ValueError(f"named type {name} is defined twice with different shapes")
                return name
            seen[name] = text
            if kind == "record":
                out = dict(node)
                out["fields"] = [{**f, "type": walk(f["type"])} for f in node["fields"]]
                return out
            return node
        if kind == "array":
            return {**node, "items": walk(node["items"])}
        if kind == "map":
            return {**node, "values": walk(node["values"])}
        if isinstance(kind, (dict, list)):
            return {**node, "type": walk(kind)}
        return node

    return walk(schema)


def _strip_namespace(node: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k != "namespace"}


def schema_to_json(schema: Schema) -> str:
    """The compact JSON text of `schema`, as Java's `Schema.toString()` writes it."""
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)


def schema_full_name(schema: Schema) -> str:
    """The full name of a top-level record schema (`org.apache.hudi.avro.model.HoodieX`)."""
    if not isinstance(schema, dict) or "name" not in schema:
        return str(schema)
    name = str(schema["name"])
    if "." in name:
        return name
    namespace = schema.get("namespace")
    return f"{namespace}.{name}" if namespace else name


def field_names(schema: dict[str, Any]) -> list[str]:
    return [str(f["name"]) for f in schema["fields"]]
