"""The shape of the configuration, walked key by key.

The configuration models (pydantic) say which keys each mapping of the YAML file accepts. This module walks
them by key path so that the loader can resolve environment overrides, suggest the key a typo meant, and
the tests can check that the example file documents every key. It also holds the small types the models
use to report problems at an exact key path.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any, Union

from pydantic import BaseModel

from tableservice.planning.keyed_policy import whole_number_error

Loc = tuple[str | int, ...]

_NO_VALUE: Any = object()


@dataclass(frozen=True)
class ConfigIssue:
    """One problem at one key path; `value` is the offending value when there is one to show."""

    loc: Loc
    message: str
    value: Any = field(default=_NO_VALUE, compare=False)
    origin: str | None = None

    @property
    def has_value(self) -> bool:
        return self.value is not _NO_VALUE

    @property
    def path(self) -> str:
        return format_loc(self.loc)

    def under(self, prefix: Loc) -> ConfigIssue:
        return ConfigIssue(prefix + self.loc, self.message, self.value, self.origin)


class ConfigIssues(ValueError):
    """Raised inside model validators to report problems at key paths below the model being validated."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = issues
        super().__init__("; ".join(f"{i.path}: {i.message}" if i.loc else i.message for i in issues))


def issue(key: str | int | Loc, message: str, value: Any = _NO_VALUE) -> ConfigIssues:
    loc: Loc = key if isinstance(key, tuple) else (key,)
    return ConfigIssues([ConfigIssue(loc, message, value)])


def format_loc(loc: Loc) -> str:
    """`('tables', 2, 'policy', 'compaction', 'hoodie.x')` -> `tables[2].policy.compaction.hoodie.x`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "(top level)"


@dataclass(frozen=True)
class MirrorOf:
    """Marks a raw mapping (per-table overrides) whose keys are those of `model`."""

    model: type[BaseModel]


@dataclass(frozen=True)
class Spec:
    """What the configuration holds at one key path: a model, a list, a free mapping or a leaf value."""

    annotation: Any
    mirror: type[BaseModel] | None = None

    @property
    def model(self) -> type[BaseModel] | None:
        if self.mirror is not None:
            return self.mirror
        ann = self.annotation
        return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None

    @property
    def origin(self) -> Any:
        return typing.get_origin(self.annotation)

    def is_list(self) -> bool:
        return self.mirror is None and self.origin in (list, tuple, Collection)

    def is_free_mapping(self) -> bool:
        return self.mirror is None and self.origin is dict

    def is_text(self) -> bool:
        """True when the value is a string: environment overrides keep such values verbatim."""
        ann = self.annotation
        if ann is str:
            return True
        if typing.get_origin(ann) is typing.Literal:
            return all(isinstance(a, str) for a in typing.get_args(ann))
        return False


def spec_of(annotation: Any, metadata: Collection[Any] = ()) -> Spec:
    """Strip `Annotated[...]` and `X | None` down to the part that says what the key holds."""
    mirror = next((m.model for m in metadata if isinstance(m, MirrorOf)), None)
    ann = annotation
    while True:
        origin = typing.get_origin(ann)
        if origin is typing.Annotated:
            args = typing.get_args(ann)
            mirror = mirror or next((m.model for m in args[1:] if isinstance(m, MirrorOf)), None)
            ann = args[0]
        elif origin in (Union, types.UnionType):
            members = [a for a in typing.get_args(ann) if a is not type(None)]
            if len(members) != 1:
                break
            ann = members[0]
        else:
            break
    return Spec(ann, mirror)


def model_keys(model: type[BaseModel]) -> dict[str, Spec]:
    """Keys a model accepts in the file (aliases where set), with what each holds; includes known extra keys."""
    out: dict[str, Spec] = {}
    for name, info in model.model_fields.items():
        if info.exclude:
            continue
        out[info.alias or name] = spec_of(info.annotation, info.metadata)
    extra = getattr(model, "config_extra_keys", None)
    if callable(extra):
        for key in extra():
            out.setdefault(key, Spec(Any))
    return out


def child(spec: Spec, key: str | int) -> Spec | None:
    """What the configuration holds one key below `spec`, or None when `key` is not allowed there."""
    model = spec.model
    if model is not None:
        return model_keys(model).get(key) if isinstance(key, str) else None
    args = typing.get_args(spec.annotation)
    if spec.is_list():
        return spec_of(args[0]) if isinstance(key, int) and args else None
    if spec.is_free_mapping():
        return spec_of(args[1]) if isinstance(key, str) and len(args) == 2 else Spec(Any)
    return None


def resolve(root: type[BaseModel], loc: Loc) -> Spec | None:
    spec: Spec | None = Spec(root)
    for key in loc:
        if spec is None:
            return None
        spec = child(spec, key)
    return spec


def keys_at(root: type[BaseModel], loc: Loc) -> list[str] | None:
    """The keys the mapping at `loc` accepts, or None when it is free-form (or not a mapping)."""
    spec = resolve(root, loc)
    if spec is None or spec.model is None:
        return None
    return list(model_keys(spec.model))


def iter_key_paths(root: type[BaseModel], prefix: Loc = ()) -> Iterator[tuple[Loc, Spec]]:
    """Every key path the models define (lists are entered at index 0; free mappings and per-table overrides
    mirroring another section are leaves)."""
    model = Spec(root).model
    assert model is not None
    for key, spec in model_keys(model).items():
        loc = (*prefix, key)
        yield loc, spec
        if spec.model is not None and spec.mirror is None:
            yield from iter_key_paths(spec.model, loc)
        elif spec.is_list():
            item = child(spec, 0)
            if item is not None and item.model is not None:
                yield from iter_key_paths(item.model, (*loc, 0))


def normalise_key(key: str) -> str:
    """Keys compare case-insensitively with `.`, `-` and `_` treated alike (environment variable names)."""
    return re.sub(r"[._\-]", "_", key).lower()


def match_key(segment: str, candidates: Collection[str]) -> list[str]:
    """Candidates equal to `segment` up to case and `.`/`-`/`_`; an exact match wins."""
    if segment in candidates:
        return [segment]
    norm = normalise_key(segment)
    return [c for c in candidates if normalise_key(c) == norm]


def suggest(key: str, candidates: Collection[str]) -> str | None:
    """The candidate a mistyped key most likely meant, if any is close."""
    if not candidates:
        return None
    by_norm = {normalise_key(c): c for c in candidates}
    close = difflib.get_close_matches(normalise_key(key), list(by_norm), n=1, cutoff=0.75)
    return by_norm[close[0]] if close else None


_PLACES = (
    ("hoodie.write.lock.", "lock keys go in `locks` (or tables[i].locks)"),
    ("hoodie.compact", "compaction keys go in `defaults.compaction` (or tables[i].policy.compaction)"),
)


def placement_hint(key: str) -> str:
    """Where a Hudi key that is out of place belongs, as "; ..." text, or ""."""
    for prefix, hint in _PLACES:
        if key.startswith(prefix):
            return "; " + hint
    return ""


_INT_KINDS = frozenset({"int_type", "int_parsing", "int_from_float"})


def issues_from_error(error: Any, root: type[BaseModel]) -> list[ConfigIssue]:
    """Turn a pydantic ValidationError raised while validating `root` into issues at key paths."""
    out: list[ConfigIssue] = []
    for err in error.errors():
        loc: Loc = tuple(err["loc"])
        ctx = err.get("ctx") or {}
        exc = ctx.get("error")
        kind = err["type"]
        if isinstance(exc, ConfigIssues):
            out.extend(i.under(loc) for i in exc.issues)
        elif kind == "extra_forbidden":
            candidates = keys_at(root, loc[:-1]) or []
            hint = suggest(str(loc[-1]), candidates)
            more = placement_hint(str(loc[-1])) or _known_list(candidates)
            message = "unknown key" + (f"; did you mean {hint!r}?" if hint else more)
            out.append(ConfigIssue(loc, message, err.get("input", _NO_VALUE)))
        elif kind == "missing":
            out.append(ConfigIssue(loc, "required key is missing"))
        else:
            message = str(exc) if isinstance(exc, ValueError) else err["msg"]
            if kind in _INT_KINDS and not isinstance(err.get("input"), bool):
                message = whole_number_error(err.get("input")) or message
            out.append(ConfigIssue(loc, message, err.get("input", _NO_VALUE)))
    return out


def _known_list(candidates: Collection[str]) -> str:
    if not candidates or len(candidates) > 12:
        return ""
    return "; expected one of " + ", ".join(candidates)
