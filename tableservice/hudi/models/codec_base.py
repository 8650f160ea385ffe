"""Shared decoding steps: one record out of an Avro container, checked against the expected record name,
validated into a model; every failure becomes an InvalidPlanError naming the file."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from pydantic import ValidationError

from tableservice.errors import InvalidPlanError
from tableservice.hudi.models.avro_io import read_avro_container_with_schema
from tableservice.hudi.models.avsc_builders import schema_full_name
from tableservice.hudi.models.base import HudiModel

M = TypeVar("M", bound=HudiModel)


def single_avro_record(data: bytes, *, path: str, expected: Iterable[str], what: str) -> dict[str, Any]:
    """The first record of an Avro container whose writer schema is one of the `expected` full names."""
    return named_avro_record(data, path=path, expected=expected, what=what)[1]


def named_avro_record(data: bytes, *, path: str, expected: Iterable[str], what: str) -> tuple[str, dict[str, Any]]:
    """The writer schema's full name and the first record (Hudi reads only the first) of an Avro container."""
    if not data:
        raise InvalidPlanError(f"{what} file is empty", path=path)
    writer_schema, records = read_avro_container_with_schema(data, path=path)
    name = schema_full_name(writer_schema)
    wanted = set(expected)
    if name not in wanted:
        raise InvalidPlanError(f"{what} file holds a {name} record, expected {' or '.join(sorted(wanted))}", path=path)
    if not records:
        raise InvalidPlanError(f"{what} file has no record", path=path)
    return name, records[0]


def validate_model(cls: type[M], record: Mapping[str, Any], *, path: str, what: str) -> M:
    try:
        return cls.from_avro(record)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise InvalidPlanError(
            f"{what} does not match Hudi's schema: {where}: {first.get('msg')} (value {first.get('input')!r:.80})",
            path=path,
        ) from exc


def decode_avro_model(data: bytes, cls: type[M], *, path: str, expected: Iterable[str], what: str) -> M:
    record = single_avro_record(data, path=path, expected=expected, what=what)
    return validate_model(cls, record, path=path, what=what)
