"""The base of every service policy: a frozen model whose fields carry Hudi's key names, built from a
configuration mapping (string values allowed) and written back as Hudi-keyed strings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from tableservice.errors import ConfigError


class HudiKeyedPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    # Subclasses set these: the service's name in messages, the key prefixes that belong to the service (with
    # `strict`, an unknown key under them is a typo), keys under them that are accepted and ignored, and
    # alternative spellings of keys.
    service_name: ClassVar[str] = "service"
    own_prefixes: ClassVar[tuple[str, ...]] = ()
    ignored_own_keys: ClassVar[frozenset[str]] = frozenset()
    key_aliases: ClassVar[Mapping[str, str]] = {}

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
