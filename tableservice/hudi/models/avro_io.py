"""Avro object container files as Hudi writes them for timeline metadata.

Hudi's files (checked on every Avro timeline file of the fixture tables) are: magic `Obj\\x01`; a metadata
map with the single key `avro.schema` (no `avro.codec`, which means the null codec); a 16-byte sync marker;
one block (record count, byte size, records, sync marker). `write_avro_container` produces exactly that, so
with the same sync marker it reproduces Hudi's bytes.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

import fastavro

from tableservice.errors import InvalidPlanError
from tableservice.hudi.models.avsc_builders import Schema, schema_to_json
from tableservice.hudi.table.schema_guard import zero_width_array

AVRO_MAGIC = b"Obj\x01"
SYNC_SIZE = 16

_PARSED: dict[str, Any] = {}
#: Parsed schemas kept (our writer schemas and the few versions a table's files carry); damaged files may embed
#: any number of distinct schema texts, which must not grow the cache without bound.
_PARSED_LIMIT = 64


def is_avro_container(data: bytes) -> bool:
    return data[:4] == AVRO_MAGIC


def parsed_schema(schema: Schema) -> Any:
    """fastavro's parsed form of `schema`, cached by schema text; each schema gets its own name space so two
    versions of one record name never clash."""
    text = schema_to_json(schema)
    found = _PARSED.get(text)
    if found is None:
        found = fastavro.parse_schema(json.loads(text), named_schemas={})
        if len(_PARSED) >= _PARSED_LIMIT:
            _PARSED.pop(next(iter(_PARSED)))
        _PARSED[text] = found
    return found


def read_avro_container_with_schema(data: bytes, *, path: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The embedded writer schema and every record, each record resolved with that writer schema."""
    if not is_avro_container(data):
        raise InvalidPlanError(f"not an Avro container file (starts with {bytes(data[:4])!r})", path=path)
    try:
        reader = fastavro.reader(io.BytesIO(data))
        writer_schema = json.loads(reader.metadata["avro.schema"])
        unbounded = zero_width_array(writer_schema)
        if unbounded is not None:
            raise InvalidPlanError(f"Avro container's writer schema has an {unbounded}", path=path)
        records = [dict(r) for r in reader if isinstance(r, dict)]
    except InvalidPlanError:
        raise
    except Exception as exc:  # fastavro raises many kinds on truncated or damaged bytes
        raise InvalidPlanError(f"damaged Avro container: {type(exc).__name__}: {exc}", path=path) from exc
    if not isinstance(writer_schema, dict):
        raise InvalidPlanError(f"Avro container's writer schema is not a record: {str(writer_schema)[:80]}", path=path)
    return writer_schema, records


def read_avro_container(data: bytes, *, path: str) -> list[dict[str, Any]]:
    """Every record of an Avro container file, resolved with its embedded writer schema."""
    return read_avro_container_with_schema(data, path=path)[1]


def _zigzag(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _avro_bytes(value: bytes) -> bytes:
    return _zigzag(len(value)) + value


def write_avro_container(
    records: Iterable[Mapping[str, Any]], schema: Schema, *, sync_marker: bytes | None = None
) -> bytes:
    """An Avro container file holding `records` in one block, written the way Hudi writes timeline files.

    `schema` is embedded as compact JSON in the key order given (see `avsc_builders`). `sync_marker` defaults
    to 16 random bytes; pass the marker of an existing file to reproduce it byte for byte.
    """
    if sync_marker is None:
        sync_marker = os.urandom(SYNC_SIZE)
    if len(sync_marker) != SYNC_SIZE:
        raise ValueError(f"an Avro sync marker has {SYNC_SIZE} bytes, got {len(sync_marker)}")
    parsed = parsed_schema(schema)
    body = io.BytesIO()
    count = 0
    for rec in records:
        fastavro.schemaless_writer(body, parsed, dict(rec))
        count += 1
    out = io.BytesIO()
    out.write(AVRO_MAGIC)
    out.write(_zigzag(1))
    out.write(_avro_bytes(b"avro.schema"))
    out.write(_avro_bytes(schema_to_json(schema).encode("utf-8")))
    out.write(_zigzag(0))
    out.write(sync_marker)
    if count:
        payload = body.getvalue()
        out.write(_zigzag(count))
        out.write(_zigzag(len(payload)))
        out.write(payload)
        out.write(sync_marker)
    return out.getvalue()


def sync_marker_of(data: bytes) -> bytes | None:
    """The sync marker of an Avro container written by `write_avro_container` or by Hudi (its last 16 bytes
    when it has a block), or None for other bytes."""
    if not is_avro_container(data) or len(data) < 4 + SYNC_SIZE:
        return None
    return bytes(data[-SYNC_SIZE:])
