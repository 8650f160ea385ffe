"""The base of every service policy: a frozen model whose fields carry Hudi's key names, built from a
configuration mapping (string values allowed) and written back as Hudi-keyed strings."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from tableservice.errors import ConfigError

_DECIMAL = re.compile(r"\s*[-+]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][-+]?\d+)\s*")

# Upper bounds a production operator finds sensible for Hudi's numeric keys, by kind (values beyond them are typos
# or unit mistakes: a count in the billions, bytes in exabytes).
MAX_COUNT = 100_000  # commits, versions, groups, partitions, batches
MAX_HOURS = 24 * 365 * 10  # ten years
MAX_SECONDS = 3600 * 24 * 365  # a year
MAX_BYTES = 1 << 40  # 1 TiB for one file, one group, one threshold
MAX_MB = 1 << 30  # 1 PiB in MB (hoodie.compaction.target.io)


def whole_number_error(value: Any) -> str | None:
    """The message for a decimal given where a whole number is expected (2.5, 1e26, "1.0"), else None."""
    if isinstance(value, float) or (isinstance(value, str) and _DECIMAL.fullmatch(value)):
        return f"expected a whole number (an integer), got {value!r}"
    return None


def _is_int_field(annotation: Any) -> bool:
    if annotation is int:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return int in typing.get_args(annotation) and float not in typing.get_args(annotation)
    return False


class HudiKeyedPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    # Subclasses set these: the service's name in messages, the key prefixes that belong to the service (with
    # `strict`, an unknown key under them is a typo), keys under them that are accepted and ignored, and
    # alternative spellings of keys.
    service_name: ClassVar[str] = "service"
    own_prefixes: ClassVar[tuple[str, ...]] = ()
    ignored_own_keys: ClassVar[frozenset[str]] = frozenset()
    key_aliases: ClassVar[Mapping[str, str]] = {}

    @field_validator("*", mode="before")
    @classmethod
    def _whole_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """Integer keys refuse decimals (2.5, 1e26, "3.0") rather than round or truncate them."""
        name = info.field_name
        if name is not None and _is_int_field(cls.model_fields[name].annotation) and not isinstance(value, bool):
            problem = whole_number_error(value)
            if problem is not None:
                raise ValueError(problem)
        return value

    @classmethod
    def keys(cls) -> dict[str, str]:
        """Hudi key → attribute name."""
        return {str(info.serialization_alias or name): name for name, info in cls.model_fields.items()}

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, strict: bool = False) -> Self:
        """A policy from a configuration mapping. Unknown keys are ignored, except with `strict=True` for keys
        under the service's own prefixes that are not known to be ignorable (likely typos). Invalid values raise
        ConfigError naming key=value."""
        keys = cls.keys()
        data: dict[str, Any] = {}
        for raw_key, value in values.items():
            key = cls.key_aliases.get(raw_key, raw_key)
            if key in keys or key in keys.values():
                data[key] = value
            elif strict and key.startswith(cls.own_prefixes) and key not in cls.ignored_own_keys:
                raise ConfigError(f"unknown {cls.service_name} setting {raw_key}={value!r}")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            problems = []
            for err in e.errors():
                if err["loc"]:
                    problems.append(f"{err['loc'][0]}={err.get('input')!r}: {err['msg']}")
                else:  # a check across fields
                    problems.append(str(err["msg"]).removeprefix("Value error, "))
            raise ConfigError(f"invalid {cls.service_name} policy: " + "; ".join(problems)) from e

    def to_mapping(self) -> dict[str, str]:
        """The policy as Hudi-keyed strings (unset optional keys left out)."""
        out: dict[str, str] = {}
        for key, value in self.model_dump(by_alias=True).items():
            if value is not None:
                out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out
