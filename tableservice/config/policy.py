"""Per-service policy sections of the configuration (`defaults.<service>` and `tables[i].policy.<service>`).

A section holds the daemon's own switches for one table service (`enabled`, and for compaction `schedule` and
`execute`) next to Hudi's keys for that service, spelled as Hudi spells them
(`hoodie.compact.inline.max.delta.commits`), plus the project's own `tableservice.<service>.*` keys.
Compaction's keys are those of planning's `CompactionPolicy`, which checks them; services still to come plug
their validator in with `set_policy_validator`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tableservice.config.schema import ConfigIssue, ConfigIssues, issue, placement_hint, suggest
from tableservice.config.slo import SloSettings
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.clustering.policy import ClusteringPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.planning.indexing.policy import IndexingPolicy
from tableservice.planning.keyed_policy import HudiKeyedPolicy, whole_number_error
from tableservice.planning.metadata.policy import MetadataPolicy
from tableservice.planning.write import WritePolicy

HudiValue = str | int | float | bool
"""A value of a Hudi key as YAML gives it (Hudi's own properties files hold the same values as strings)."""

PolicyValidator = Callable[[Mapping[str, HudiValue]], Mapping[str, HudiValue] | None]
"""Checks one service's keys; returns them normalised (or None to keep them as given); raises ValueError or a
pydantic ValidationError (whose locations are keys of the mapping) when a value is wrong."""

_HUDI_PREFIXES = ("hoodie.", "tableservice.")


# --- compaction: planning's CompactionPolicy ---------------------------------------------------------------------

# The section's `enabled`/`schedule` switches stand for CompactionPolicy's own enabled key.
_COMPACTION_SWITCH = "tableservice.compaction.enabled"


# --- failed writes (rollback of writers' failed attempts) --------------------------------------------------------

FAILED_WRITES_POLICY = "hoodie.cleaner.policy.failed.writes"
HEARTBEAT_INTERVAL = "hoodie.client.heartbeat.interval_in_ms"
HEARTBEAT_MISSES = "hoodie.client.heartbeat.tolerable.misses"
_FAILED_WRITES_DEFAULTS: dict[str, HudiValue] = {
    FAILED_WRITES_POLICY: "LAZY",
    HEARTBEAT_INTERVAL: 60_000,
    HEARTBEAT_MISSES: 2,
}


def _failed_writes_keys() -> frozenset[str]:
    return frozenset(_FAILED_WRITES_DEFAULTS)


def _validate_failed_writes(values: Mapping[str, HudiValue]) -> Mapping[str, HudiValue]:
    out = dict(values)
    policy = out.get(FAILED_WRITES_POLICY)
    if policy is not None:
        if not isinstance(policy, str) or policy.strip().upper() not in ("EAGER", "LAZY", "NEVER"):
            raise issue(FAILED_WRITES_POLICY, "expected EAGER, LAZY or NEVER", policy)
        out[FAILED_WRITES_POLICY] = policy.strip().upper()
    for key, bound in ((HEARTBEAT_INTERVAL, 3_600_000), (HEARTBEAT_MISSES, 1000)):
        value = out.get(key)
        if value is None:
            continue
        decimal = whole_number_error(value) if not isinstance(value, bool) else None
        if decimal is not None:
            raise issue(key, decimal, value)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= bound:
            raise issue(key, f"expected a whole number from 1 to {bound}", value)
    return out


# --- clustering: planning's ClusteringPolicy ---------------------------------------------------------------------

_CLUSTERING_SWITCH = "tableservice.clustering.enabled"


# --- clean and archival: planning's CleanPolicy and ArchivalPolicy ---------------------------------------------------

_CLEAN_SWITCH = "tableservice.clean.enabled"


def _model_validator(
    model: type[HudiKeyedPolicy], switch: str | None, *, leave_out: tuple[str, ...] = ()
) -> tuple[PolicyValidator, Callable[[], frozenset[str]]]:
    """A section checked by one of planning's policies: its Hudi keys, the keys it accepts and ignores, and its
    alternative spellings (normalised to Hudi's key), less the section's switch and keys under `leave_out` (they
    belong to another section). Returns the values as the policy reads them (full class names, upper-case enum
    names, numbers as numbers); ignored keys pass through as given."""

    def validate(values: Mapping[str, HudiValue]) -> Mapping[str, HudiValue]:
        ignored = {k: v for k, v in values.items() if k in model.ignored_own_keys}
        data = {model.key_aliases.get(k, k): v for k, v in values.items() if k not in ignored}
        dumped: dict[str, HudiValue] = model.model_validate(data).model_dump(
            mode="json", by_alias=True, exclude_unset=True
        )
        dumped.update(ignored)
        return dumped

    def keys() -> frozenset[str]:
        known = frozenset(model.keys()) | model.ignored_own_keys | frozenset(model.key_aliases)
        return frozenset(k for k in known if not k.startswith(leave_out)) - ({switch} if switch else set())

    return validate, keys


_PLANNING_MODELS: dict[str, type[HudiKeyedPolicy]] = {
    "metadata": MetadataPolicy,
    "indexing": IndexingPolicy,
    "write": WritePolicy,
    "clean": CleanPolicy,
    "archival": ArchivalPolicy,
    "compaction": CompactionPolicy,
    "clustering": ClusteringPolicy,
}
_BUILTIN: dict[str, tuple[PolicyValidator, Callable[[], frozenset[str]]]] = {
    # the failed-writes keys the clean policy accepts live in the failed_writes section
    "clean": _model_validator(
        CleanPolicy, _CLEAN_SWITCH, leave_out=(*_FAILED_WRITES_DEFAULTS, "hoodie.clean.failed.writes.policy")
    ),
    # the cleaner's and compaction's keys archival reads live in those sections
    "archival": _model_validator(ArchivalPolicy, None, leave_out=("hoodie.cleaner.", "hoodie.compact.")),
    "compaction": _model_validator(CompactionPolicy, _COMPACTION_SWITCH),
    "clustering": _model_validator(ClusteringPolicy, _CLUSTERING_SWITCH),
    "failed_writes": (_validate_failed_writes, _failed_writes_keys),
    "metadata": _model_validator(MetadataPolicy, None, leave_out=("hoodie.metadata.index.", "hoodie.metadata.record.")),
    "indexing": _model_validator(IndexingPolicy, None),
    "write": _model_validator(WritePolicy, None),
}
_RENAMED: dict[str, str] = {
    _COMPACTION_SWITCH: "set `schedule` (or `enabled`) in this section instead",
    _CLUSTERING_SWITCH: "set `schedule` in this section instead",
    _CLEAN_SWITCH: "set `schedule` (or `enabled`) in this section instead",
}

_validators: dict[str, PolicyValidator] = {}
_known_keys: dict[str, frozenset[str]] = {}


def set_policy_validator(
    service: str, validator: PolicyValidator | None, *, known_keys: Iterable[str] | None = None
) -> None:
    """Install the validator of one service's keys; None restores the built-in one (compaction) or none.

    `known_keys` lists the keys the validator understands: they drive "did you mean" suggestions and the
    resolution of environment overrides; without it every `hoodie.*` / `tableservice.*` key goes to the
    validator unchecked. Call this before `load_config`; configurations loaded earlier keep their checks.
    """
    if validator is None:
        _validators.pop(service, None)
        _known_keys.pop(service, None)
        return
    _validators[service] = validator
    if known_keys is None:
        _known_keys.pop(service, None)
    else:
        _known_keys[service] = frozenset(known_keys)


def _validator_for(service: str) -> tuple[PolicyValidator | None, frozenset[str] | None]:
    if service in _validators:
        return _validators[service], _known_keys.get(service)
    if service in _BUILTIN:
        validator, keys = _BUILTIN[service]
        return validator, keys()
    return None, frozenset()


def known_hudi_keys(service: str) -> frozenset[str] | None:
    """The Hudi keys accepted for `service`, or None when an installed validator decides alone."""
    return _validator_for(service)[1]


def _check_hudi_keys(service: str, values: dict[str, HudiValue]) -> dict[str, HudiValue]:
    validator, _ = _validator_for(service)
    if validator is None:
        return values
    try:
        result = validator(dict(values))
    except ValidationError as e:
        raise ConfigIssues(
            [
                ConfigIssue(tuple(err["loc"][:1]) if err["loc"] else (), _message(err), err.get("input"))
                for err in e.errors()
            ]
        ) from None
    except (ValueError, TypeError) as e:
        raise issue((), str(e)) from None
    return dict(result) if result is not None else values


def _message(err: Any) -> str:
    exc = (err.get("ctx") or {}).get("error")
    return str(exc) if isinstance(exc, ValueError) else str(err["msg"])


# --- sections ----------------------------------------------------------------------------------------------------


class HudiKeyedSection(BaseModel):
    """Base of every section holding Hudi keys (kept as extra fields) next to the daemon's own fields."""

    model_config = ConfigDict(strict=True, frozen=True, extra="allow")
    __pydantic_extra__: dict[str, Any] = Field(init=False)
    service: ClassVar[str]

    @classmethod
    def config_extra_keys(cls) -> Collection[str]:
        """The keys the example documents: those that change plans (keys accepted and ignored, and alternative
        spellings, are not)."""
        model = _PLANNING_MODELS.get(cls.service)
        skip = (model.ignored_own_keys | frozenset(model.key_aliases)) if model is not None else frozenset()
        return sorted(k for k in known_hudi_keys(cls.service) or () if k not in skip)

    @model_validator(mode="before")
    @classmethod
    def _split_hudi_keys(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        fields = {info.alias or name for name, info in cls.model_fields.items()}
        known = known_hudi_keys(cls.service)
        problems: list[ConfigIssue] = []
        own: dict[str, Any] = {}
        hudi: dict[str, HudiValue] = {}
        for key, value in data.items():
            if key in fields:
                own[key] = value
            elif key in _RENAMED:
                problems.append(ConfigIssue((key,), _RENAMED[key], value))
            elif not isinstance(key, str) or not key.startswith(_HUDI_PREFIXES):
                hint = suggest(str(key), [*fields, *(known or ())])
                more = f"; did you mean {hint!r}?" if hint else f"; expected {', '.join(sorted(fields))} or Hudi keys"
                problems.append(ConfigIssue((key,), "unknown key" + more, value))
            elif known is not None and key not in known:
                hint = suggest(key, known)
                more = f"; did you mean {hint!r}?" if hint else (placement_hint(key) or f" for {cls.service}")
                problems.append(ConfigIssue((key,), "unknown Hudi key" + more, value))
            elif value is None:
                continue
            elif not isinstance(value, str | int | float | bool):
                problems.append(ConfigIssue((key,), "expected a string, number or boolean", value))
            else:
                hudi[key] = value
        try:
            checked = _check_hudi_keys(cls.service, hudi)
        except ConfigIssues as e:
            problems.extend(e.issues)
        if problems:
            raise ConfigIssues(problems)
        return {**own, **checked}

    def hudi_options(self) -> dict[str, HudiValue]:
        """The service's Hudi keys set in the configuration (Hudi's defaults apply to the others)."""
        return dict(self.__pydantic_extra__ or {})

    def hudi_properties(self) -> dict[str, str]:
        """The same as Hudi properties (strings; booleans lower-case)."""
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in self.hudi_options().items()}


class ServicePolicy(HudiKeyedSection):
    """Base of every per-service section: `enabled` plus the service's Hudi keys."""

    enabled: bool = True
    """False switches the service off entirely."""


class CompactionPolicySettings(ServicePolicy):
    """`compaction`: schedule compaction plans when Hudi's trigger keys say so, and execute pending plans."""

    service: ClassVar[str] = "compaction"

    schedule: bool = True
    """Schedule new compaction plans when the trigger strategy says so."""
    execute: bool = True
    """Execute pending compaction plans (the daemon's and those scheduled by writers)."""

    def policy(self) -> CompactionPolicy:
        """Planning's policy for these settings; it schedules only when `enabled` and `schedule` are both true."""
        return CompactionPolicy.from_mapping(
            {**self.hudi_options(), _COMPACTION_SWITCH: self.enabled and self.schedule}
        )

    @property
    def executes(self) -> bool:
        """Pending compaction plans are executed: `enabled` and `execute` are both true."""
        return self.enabled and self.execute


class FailedWritesPolicySettings(ServicePolicy):
    """`failed_writes`: roll back writers' failed attempts per Hudi's `hoodie.cleaner.policy.failed.writes`."""

    service: ClassVar[str] = "failed_writes"

    def settings(self) -> tuple[str, int, int]:
        """(policy, heartbeat interval ms, tolerable misses), Hudi's defaults where not set; policy NEVER when
        the section is disabled."""
        values = {**_FAILED_WRITES_DEFAULTS, **self.hudi_options()}
        policy = str(values[FAILED_WRITES_POLICY]) if self.enabled else "NEVER"
        return policy, int(values[HEARTBEAT_INTERVAL]), int(values[HEARTBEAT_MISSES])


class ClusteringPolicySettings(ServicePolicy):
    """`clustering`: execute pending clustering plans (ours and writers'); schedule new ones only when asked
    (`schedule: true`), as Hudi's clustering is off by default."""

    service: ClassVar[str] = "clustering"

    schedule: bool = False
    """Schedule new clustering plans when the trigger says so (Hudi: hoodie.clustering.async.enabled)."""
    execute: bool = True
    """Execute pending clustering plans."""

    def policy(self) -> ClusteringPolicy:
        return ClusteringPolicy.from_mapping(
            {**self.hudi_options(), _CLUSTERING_SWITCH: self.enabled and self.schedule}
        )

    @property
    def executes(self) -> bool:
        return self.enabled and self.execute


class CleanPolicySettings(ServicePolicy):
    """`clean`: schedule cleans when due (`hoodie.clean.max.commits` commits since the last one) and execute
    pending cleans (ours and writers')."""

    service: ClassVar[str] = "clean"

    schedule: bool = True
    execute: bool = True

    def policy(self) -> CleanPolicy:
        return CleanPolicy.from_mapping({**self.hudi_options(), _CLEAN_SWITCH: self.enabled and self.schedule})

    @property
    def executes(self) -> bool:
        return self.enabled and self.execute


class ArchivalPolicySettings(ServicePolicy):
    """`archival`: keep the active timeline between `hoodie.keep.min.commits` and `hoodie.keep.max.commits`."""

    service: ClassVar[str] = "archival"

    def policy(
        self, clean: CleanPolicySettings | None = None, compaction: CompactionPolicySettings | None = None
    ) -> ArchivalPolicy:
        """The archival policy; the cleaner's and the compaction trigger's keys, which move Hudi's archival
        bounds, come from those services' sections."""
        values: dict[str, Any] = {}
        if clean is not None:
            values.update({k: v for k, v in clean.hudi_options().items() if k.startswith("hoodie.cleaner.")})
        if compaction is not None:
            values.update(
                {
                    k: v
                    for k, v in compaction.hudi_options().items()
                    if k in ("hoodie.compact.inline.trigger.strategy", "hoodie.compact.inline.max.delta.commits")
                }
            )
        values.update(self.hudi_options())
        return ArchivalPolicy.from_mapping(values)


class MetadataPolicySettings(ServicePolicy):
    """`metadata`: keep the metadata table (`.hoodie/metadata`) of version 8 and 9 tables compacted, cleaned and
    archived (`hoodie.metadata.*` keys), and check it after each action when asked. Every commit the daemon makes
    updates the metadata table whatever this section says: a table's readers depend on it."""

    service: ClassVar[str] = "metadata"

    verify_after_action: bool = False
    """After each action on a table with a metadata table, compare the metadata table with storage (what
    `tableservice table verify` does) and mark the table degraded when they differ."""

    def policy(self) -> MetadataPolicy:
        return MetadataPolicy.from_mapping(self.hudi_options())


class IndexingPolicySettings(ServicePolicy):
    """`indexing`: the metadata-table indexes the table should have (Hudi's `hoodie.metadata.record.index.enable`,
    `hoodie.metadata.index.*.enable` keys, and `secondary_indexes`: index name -> column); the daemon schedules an
    `indexing` action for those it lacks, and executes pending indexing plans whoever wrote them."""

    service: ClassVar[str] = "indexing"

    schedule: bool = True
    """Plan indexing for wanted indexes the table lacks."""
    execute: bool = True
    """Execute pending indexing plans (a Hudi writer's or an operator's too)."""
    secondary_indexes: dict[str, str] = {}
    """Secondary indexes (table version 8+): index name -> the column it indexes."""

    def policy(self) -> IndexingPolicy:
        return IndexingPolicy.from_mapping(self.hudi_options())


class WriteSettings(HudiKeyedSection):
    """`write`: how the daemon writes the base files of compaction and clustering, with Hudi's storage keys (the
    Parquet codec, the footer's bloom filter): set them as the table's writers have them."""

    service: ClassVar[str] = "write"

    def policy(self) -> WritePolicy:
        return WritePolicy.from_mapping(self.hudi_options())


_PLANNED_SERVICES: tuple[str, ...] = ()


class PolicySet(BaseModel):
    """`defaults` (and the shape of `tables[i].policy`): one section per table service.

    A new service adds one field here (e.g. `clean: CleanPolicySettings = CleanPolicySettings()`).
    """

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    compaction: CompactionPolicySettings = CompactionPolicySettings()
    clustering: ClusteringPolicySettings = ClusteringPolicySettings()
    clean: CleanPolicySettings = CleanPolicySettings()
    archival: ArchivalPolicySettings = ArchivalPolicySettings()
    failed_writes: FailedWritesPolicySettings = FailedWritesPolicySettings()
    metadata: MetadataPolicySettings = MetadataPolicySettings()
    indexing: IndexingPolicySettings = IndexingPolicySettings()
    slo: SloSettings = SloSettings()
    """Not a service: the table's SLO targets (`tableservice.config.slo`)."""
    write: WriteSettings = WriteSettings()
    """Not a service: how compaction and clustering write base files."""

    @model_validator(mode="before")
    @classmethod
    def _planned(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            problems = [
                ConfigIssue((key,), f"the {key} service is not configurable yet; remove this section", data[key])
                for key in _PLANNED_SERVICES
                if key in data and key not in cls.model_fields
            ]
            if problems:
                raise ConfigIssues(problems)
        return data

    def service_names(self) -> list[str]:
        """The sections that configure a table service (not `slo` or `write`)."""
        return [name for name in type(self).model_fields if isinstance(getattr(self, name), ServicePolicy)]

    def section(self, service: str) -> ServicePolicy:
        value = getattr(self, service, None)
        if not isinstance(value, ServicePolicy):
            raise KeyError(service)
        return value


def merge_policy(defaults: PolicySet, overrides: Mapping[str, Any]) -> PolicySet:
    """`defaults` with per-table `overrides` laid over key by key (None values inherit), validated again."""
    raw: dict[str, Any] = defaults.model_dump(by_alias=True)
    for service, section in overrides.items():
        if not isinstance(section, Mapping):
            raw[service] = section
            continue
        merged = dict(raw.get(service) or {})
        merged.update({k: v for k, v in section.items() if v is not None})
        raw[service] = merged
    return PolicySet.model_validate(raw)
