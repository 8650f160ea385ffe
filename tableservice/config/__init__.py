"""The daemon's configuration: one YAML file (see `config.example.yaml`), validated with pydantic.

    config = load_config("/etc/tableservice.yaml")          # raises ConfigError naming key path and value
    for entry in config.resolve_tables(storage):             # listed tables + discovered ones
        policy = config.effective_policy(entry)              # defaults merged with the table's overrides
        locks = config.effective_locks(entry)
    added, removed, changed = diff_tables(old, new)          # on reload (SIGHUP, file change)

The implementation is split over `config_model` (sections), `config_policy` (per-service policies and the
validator hook), `config_locks` (Hudi's lock keys), `config_load` (YAML, environment overrides, errors),
`config_discovery` (finding tables) and `config_schema` (walking the models by key).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from tableservice.config.cost import CostSettings
from tableservice.config.discovery import discover_tables, glob_regex
from tableservice.config.identity import NameClash, hoodie_table_name, named_tables, resolve_named_tables
from tableservice.config.load import (
    ENV_PREFIX,
    ConfigValidationError,
    apply_env_overrides,
    find_secrets,
    load_config,
    parse_config,
)
from tableservice.config.locks import LOCK_PROVIDERS, LockKind, LockSettings, merge_locks
from tableservice.config.model import (
    DaemonConfig,
    DiscoveryRoot,
    HistorySettings,
    HttpSettings,
    LogSettings,
    RetrySettings,
    ServiceSettings,
    SparkSettings,
    StorageSettings,
    TableEntry,
    TableServiceManagerSettings,
)
from tableservice.config.policy import (
    CompactionPolicySettings,
    HudiValue,
    PolicySet,
    PolicyValidator,
    ServicePolicy,
    known_hudi_keys,
    merge_policy,
    set_policy_validator,
)
from tableservice.config.schema import ConfigIssue, format_loc
from tableservice.config.slo import BackoffSettings, GroupSettings, SloSettings, group_of


class TableDiff(NamedTuple):
    """Table locations added, removed and changed (name, effective policy or locks) between two configs."""

    added: list[str]
    removed: list[str]
    changed: list[str]


def diff_tables(
    old: DaemonConfig,
    new: DaemonConfig,
    *,
    old_discovered: Iterable[str] = (),
    new_discovered: Iterable[str] = (),
) -> TableDiff:
    """Compare the tables two configurations serve. Tables found by discovery can be passed in (their
    locations) so that they take part: a discovered table changes when `defaults` or `locks` change."""

    def fingerprints(config: DaemonConfig, discovered: Iterable[str]) -> dict[str, str]:
        out = {t.uri: config.table_fingerprint(t) for t in config.tables}
        for uri in discovered:
            entry = TableEntry.model_validate({"uri": uri})
            out.setdefault(entry.uri, config.table_fingerprint(entry))
        return out

    before = fingerprints(old, old_discovered)
    after = fingerprints(new, new_discovered)
    return TableDiff(
        added=sorted(after.keys() - before.keys()),
        removed=sorted(before.keys() - after.keys()),
        changed=sorted(uri for uri in before.keys() & after.keys() if before[uri] != after[uri]),
    )


__all__ = [
    "ENV_PREFIX",
    "LOCK_PROVIDERS",
    "BackoffSettings",
    "CompactionPolicySettings",
    "ConfigIssue",
    "ConfigValidationError",
    "CostSettings",
    "DaemonConfig",
    "DiscoveryRoot",
    "GroupSettings",
    "HistorySettings",
    "HttpSettings",
    "HudiValue",
    "LockKind",
    "LockSettings",
    "LogSettings",
    "NameClash",
    "PolicySet",
    "PolicyValidator",
    "RetrySettings",
    "ServicePolicy",
    "ServiceSettings",
    "SloSettings",
    "SparkSettings",
    "StorageSettings",
    "TableDiff",
    "TableEntry",
    "TableServiceManagerSettings",
    "apply_env_overrides",
    "diff_tables",
    "discover_tables",
    "find_secrets",
    "format_loc",
    "glob_regex",
    "group_of",
    "hoodie_table_name",
    "known_hudi_keys",
    "load_config",
    "merge_locks",
    "merge_policy",
    "named_tables",
    "parse_config",
    "resolve_named_tables",
    "set_policy_validator",
]
