"""The `slo` section (defaults and per table), `service.groups` and `service.backoff`: values, merging and the
errors a wrong file gets."""

from __future__ import annotations

import pytest

from tableservice.config import group_of
from tableservice.config.load import parse_config
from tableservice.errors import ConfigError
from tableservice.planning.slo import SloTargets

TABLES = "tables:\n  - {uri: /lake/a, name: a}\n  - {uri: /lake/b, name: b}\n  - {uri: /lake/c}\n"


def refused(text: str) -> str:
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="daemon.yaml")
    return str(err.value)


def test_targets_merge_defaults_and_table_overrides_key_by_key() -> None:
    config = parse_config(
        "defaults:\n  slo: {max_uncompacted_log_age_seconds: 600, max_pending_age_seconds: 1800}\n"
        "tables:\n  - uri: /lake/a\n    name: a\n    policy:\n      slo: {max_uncompacted_log_age_seconds: 60,"
        " max_small_files: 10}\n  - {uri: /lake/b, name: b}\n"
    )
    a, b = config.tables
    assert config.effective_policy(a).slo.targets() == SloTargets(
        max_uncompacted_log_age_seconds=60, max_small_files=10, max_pending_age_seconds=1800
    )
    assert config.effective_policy(b).slo.targets() == SloTargets(
        max_uncompacted_log_age_seconds=600, max_pending_age_seconds=1800
    )
    assert not parse_config("").defaults.slo.targets()  # no target: served oldest-first as before
    assert parse_config("").service.backoff.lock_wait_seconds is None  # back-off off by default


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("defaults:\n  slo: {max_log_age_seconds: 5}\n", "defaults.slo.max_log_age_seconds = 5 (line 2): unknown key"),
        ("defaults:\n  slo: {max_small_files: 100001}\n", "defaults.slo.max_small_files = 100001"),
        ("defaults:\n  slo: {max_pending_age_seconds: 604801}\n", "defaults.slo.max_pending_age_seconds = 604801"),
        ("defaults:\n  slo: {max_uncompacted_log_age_seconds: 0}\n", "greater than 0"),
        ("defaults:\n  slo: {max_log_files_per_file_group: 2.5}\n", "expected a whole number (an integer), got 2.5"),
        ("defaults:\n  slo: {max_pending_age_seconds: .inf}\n", "finite"),
        ("service:\n  backoff: {lock_wait_seconds: 90000}\n", "service.backoff.lock_wait_seconds = 90000"),
        (
            "service:\n  backoff: {initial_delay_seconds: 60, max_delay_seconds: 30}\n",
            "service.backoff.max_delay_seconds = 30.0 (line 2): must be at least initial_delay_seconds (60)",
        ),
        ("service:\n  backoff: {jitter: 1}\n", "service.backoff.jitter = 1 (line 2): unknown key"),
        (
            "service:\n  groups:\n    g: {max_concurrent_actions: 257, tables: [a]}\n" + TABLES,
            "service.groups.g.max_concurrent_actions = 257",
        ),
        ("service:\n  groups:\n    g: {tables: [a]}\n" + TABLES, "service.groups.g.max_concurrent_actions"),
        ("service:\n  groups:\n    g: {max_concurrent_actions: 1, tables: [a], quota: 2}\n" + TABLES, "unknown key"),
    ],
)
def test_bad_values_are_refused_naming_the_key(text: str, shown: str) -> None:
    assert shown in refused(text)


def test_groups_name_listed_tables_once() -> None:
    message = refused("service:\n  groups:\n    g: {max_concurrent_actions: 1, tables: [a, zz, c, yy]}\n" + TABLES)
    assert "service.groups.g.tables" in message and "unknown tables 'zz', 'c', 'yy'" in message  # c has no name
    message = refused(
        "service:\n  groups:\n    g: {max_concurrent_actions: 1, tables: [a]}\n"
        "    h: {max_concurrent_actions: 1, tables: [b, a]}\n" + TABLES
    )
    assert "service.groups.h.tables[1] = 'a'" in message and "already in group 'g'" in message
    message = refused("service:\n  groups:\n    g: {max_concurrent_actions: 1, tables: [a, a]}\n" + TABLES)
    assert "service.groups.g.tables[1] = 'a'" in message and "listed twice" in message
    config = parse_config(
        "service:\n  groups:\n    g: {max_concurrent_actions: 1, tables: [a, b]}\n    h: {max_concurrent_actions: 3,"
        " tables: [c]}\n" + TABLES.replace("{uri: /lake/c}", "{uri: /lake/c, name: c}")
    )
    groups = config.service.groups
    assert [group_of(groups, t) for t in ("a", "b", "c", "d")] == [("g", 1), ("g", 1), ("h", 3), None]
