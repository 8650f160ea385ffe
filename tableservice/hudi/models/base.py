"""The base of every timeline metadata model.

Attributes are snake_case; each has Hudi's Avro/JSON field name as its alias (camelCase, generated, or given
explicitly where Hudi's name is irregular). Models validate from Hudi-named dicts (`from_avro`) or from
keyword arguments with either name, and dump with Hudi's names (`to_avro`). Avro arrays are tuples, maps are
dicts (in the order read, so re-encoding keeps Hudi's bytes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

AvroInt = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
"""An Avro `int` (32-bit signed)."""
AvroLong = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
"""An Avro `long` (64-bit signed)."""


class HudiModel(BaseModel):
    """Frozen pydantic model of one Hudi Avro record. Unknown fields of newer writers are ignored."""

    model_config = ConfigDict(
        frozen=True,
        populate_by_name=True,
        alias_generator=to_camel,
        extra="ignore",
    )

    avro_name: ClassVar[str] = ""
    """Hudi's record name (`HoodieWriteStat`...)."""

    @classmethod
    def from_avro(cls, record: Mapping[str, Any]) -> Self:
        """The model of a record decoded from Avro (or of a Hudi-named dict from JSON)."""
        return cls.model_validate(record)

    def to_avro(self) -> dict[str, Any]:
        """The record as a dict keyed by Hudi's field names, arrays as lists, ready for fastavro (which reads a
        tuple in a union as a `(branch name, value)` pair)."""
        plain: dict[str, Any] = _lists(self.model_dump(by_alias=True))
        return plain

    @classmethod
    def hudi_field_names(cls) -> list[str]:
        """Hudi's names of the declared fields, in declaration order (= Avro schema order)."""
        return [info.alias or name for name, info in cls.model_fields.items()]


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value
