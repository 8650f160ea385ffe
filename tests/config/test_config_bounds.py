"""Every numeric setting has an upper bound an operator would find sensible, and whole-number settings refuse
decimals; the example file and the chart's values still load."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import annotated_types
import pytest
import yaml
from pydantic import BaseModel

from tableservice.config import load_config
from tableservice.config.load import parse_config
from tableservice.config.locks import LockSettings
from tableservice.config.model import DiscoveryRoot, HttpSettings, RetrySettings, ServiceSettings
from tableservice.config.slo import BackoffSettings, GroupSettings, SloSettings
from tableservice.errors import ConfigError
from tableservice.planning.archival import ArchivalPolicy
from tableservice.planning.clean.policy import CleanPolicy
from tableservice.planning.clustering.policy import ClusteringPolicy
from tableservice.planning.compaction.policy import CompactionPolicy
from tableservice.planning.metadata.policy import MetadataPolicy
from tableservice.planning.write import WritePolicy

REPO = Path(__file__).resolve().parents[2]
ZK = "locks:\n  hoodie.write.lock.provider: zookeeper\n  hoodie.write.lock.zookeeper.url: zk\n" \
     "  hoodie.write.lock.zookeeper.base_path: /h\n"  # fmt: skip

# (the file, the key path named, the bound named)
OVER_BOUND = [
    ("service:\n  max_concurrent_actions: 257\n", "service.max_concurrent_actions = 257", "256"),
    ("service:\n  poll_interval_seconds: 86401\n", "service.poll_interval_seconds = 86401", "86400"),
    ("service:\n  shutdown_grace_seconds: 1.0e+6\n", "service.shutdown_grace_seconds = 1000000.0", "86400"),
    ("service:\n  poll_jitter: 1.0\n", "service.poll_jitter = 1.0", "less than 1"),
    ("service:\n  retry:\n    initial_backoff_seconds: 90000\n    max_backoff_seconds: 90000\n",
     "service.retry.initial_backoff_seconds = 90000", "86400"),
    ("service:\n  retry:\n    quarantine_after_failures: 1001\n", "service.retry.quarantine_after_failures = 1001",
     "1000"),
    ("service:\n  retry:\n    quarantine_seconds: 604801\n", "service.retry.quarantine_seconds = 604801", "604800"),
    ("service:\n  http:\n    port: 65536\n", "service.http.port = 65536", "65535"),
    ("discovery:\n  - root: /lake\n    max_depth: 33\n", "discovery[0].max_depth = 33", "32"),
    ("locks:\n  hoodie.write.lock.wait_time_ms: 3600001\n", "locks.hoodie.write.lock.wait_time_ms = 3600001",
     "3600000"),
    ("locks:\n  hoodie.write.lock.num_retries: 1001\n", "locks.hoodie.write.lock.num_retries = 1001", "1000"),
    ("locks:\n  hoodie.write.lock.max_wait_time_ms_between_retry: 600001\n",
     "locks.hoodie.write.lock.max_wait_time_ms_between_retry = 600001", "600000"),
    (ZK + "  hoodie.write.lock.zookeeper.port: 65536\n", "locks.hoodie.write.lock.zookeeper.port = 65536", "65535"),
    (ZK + "  hoodie.write.lock.zookeeper.session_timeout_ms: 3600001\n",
     "locks.hoodie.write.lock.zookeeper.session_timeout_ms = 3600001", "3600000"),
    ("locks:\n  hoodie.write.lock.dynamodb.write_capacity: 40001\n",
     "locks.hoodie.write.lock.dynamodb.write_capacity = 40001", "40000"),
    ("defaults:\n  compaction:\n    hoodie.compact.inline.max.delta.commits: 100001\n",
     "defaults.compaction.hoodie.compact.inline.max.delta.commits = 100001", "100000"),
    ("defaults:\n  compaction:\n    hoodie.compact.inline.max.delta.seconds: 31536001\n",
     "defaults.compaction.hoodie.compact.inline.max.delta.seconds = 31536001", "31536000"),
    ("defaults:\n  compaction:\n    hoodie.compaction.target.io: 1073741825\n",
     "defaults.compaction.hoodie.compaction.target.io = 1073741825", "1073741824"),
    ("defaults:\n  compaction:\n    hoodie.parquet.max.file.size: 1099511627777\n",
     "defaults.compaction.hoodie.parquet.max.file.size = 1099511627777", "1099511627776"),
    ("defaults:\n  compaction:\n    hoodie.memory.compaction.max.size: 1099511627777\n",
     "defaults.compaction.hoodie.memory.compaction.max.size = 1099511627777", "1099511627776"),
    ("defaults:\n  compaction:\n    hoodie.memory.compaction.fraction: 1.5\n",
     "defaults.compaction.hoodie.memory.compaction.fraction = 1.5", "1"),
    ("defaults:\n  write:\n    hoodie.index.bloom.num_entries: 100000001\n",
     "defaults.write.hoodie.index.bloom.num_entries = 100000001", "100000000"),
    ("defaults:\n  write:\n    hoodie.bloom.index.filter.dynamic.max.entries: 100000001\n",
     "defaults.write.hoodie.bloom.index.filter.dynamic.max.entries = 100000001", "100000000"),
    ("defaults:\n  clean:\n    hoodie.cleaner.hours.retained: 87601\n",
     "defaults.clean.hoodie.cleaner.hours.retained = 87601", "87600"),
    ("defaults:\n  clean:\n    hoodie.cleaner.commits.retained: '100001'\n",
     "defaults.clean.hoodie.cleaner.commits.retained = '100001'", "100000"),
    ("defaults:\n  clustering:\n    hoodie.clustering.plan.strategy.max.bytes.per.group: 1099511627777\n",
     "defaults.clustering.hoodie.clustering.plan.strategy.max.bytes.per.group = 1099511627777", "1099511627776"),
    ("defaults:\n  archival:\n    hoodie.keep.min.commits: 100001\n    hoodie.keep.max.commits: 100002\n",
     "defaults.archival.hoodie.keep.min.commits = 100001", "100000"),
    ("defaults:\n  metadata:\n    hoodie.metadata.compact.max.delta.commits: 100001\n",
     "defaults.metadata.hoodie.metadata.compact.max.delta.commits = 100001", "100000"),
    ("defaults:\n  failed_writes:\n    hoodie.client.heartbeat.interval_in_ms: 3600001\n",
     "defaults.failed_writes (line 2): hoodie.client.heartbeat.interval_in_ms", "from 1 to 3600000"),
    ("tables:\n  - uri: /data/t\n    policy:\n      compaction:\n"
     "        hoodie.compact.inline.max.delta.commits: 100001\n",
     "tables[0].policy.compaction.hoodie.compact.inline.max.delta.commits = 100001", "100000"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "key", "bound"), OVER_BOUND, ids=[c[1].split(" = ")[0].split(": ")[-1] for c in OVER_BOUND]
)
def test_over_bound_values_are_refused_naming_key_and_bound(text: str, key: str, bound: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="daemon.yaml")
    message = str(err.value)
    assert key in message
    assert bound in message.split(key, 1)[1]


DECIMALS = [
    ("service:\n  max_concurrent_actions: 1.0e+26\n", "service.max_concurrent_actions = 1e+26", "1e+26"),
    ("service:\n  max_concurrent_actions: 1e26\n", "service.max_concurrent_actions = '1e26'", "'1e26'"),
    ("service:\n  retry:\n    quarantine_after_failures: 2.5\n", "service.retry.quarantine_after_failures = 2.5",
     "2.5"),
    ("locks:\n  hoodie.write.lock.num_retries: 3.0\n", "locks.hoodie.write.lock.num_retries = 3.0", "3.0"),
    ("defaults:\n  compaction:\n    hoodie.compact.inline.max.delta.commits: 2.5\n",
     "defaults.compaction.hoodie.compact.inline.max.delta.commits = 2.5", "2.5"),
    ("defaults:\n  compaction:\n    hoodie.compact.inline.max.delta.commits: 3.0\n",
     "defaults.compaction.hoodie.compact.inline.max.delta.commits = 3.0", "3.0"),
    ("defaults:\n  clean:\n    hoodie.cleaner.commits.retained: '1e26'\n",
     "defaults.clean.hoodie.cleaner.commits.retained = '1e26'", "'1e26'"),
    ("defaults:\n  failed_writes:\n    hoodie.client.heartbeat.tolerable.misses: 2.5\n",
     "hoodie.client.heartbeat.tolerable.misses", "2.5"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "key", "shown"), DECIMALS, ids=[c[1].split(" = ")[0] for c in DECIMALS])
def test_decimals_for_whole_numbers_are_refused(text: str, key: str, shown: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="daemon.yaml")
    message = str(err.value)
    assert key in message
    assert f"expected a whole number (an integer), got {shown}" in message


def test_infinite_durations_are_refused() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config("service:\n  poll_interval_seconds: .inf\n")
    assert "service.poll_interval_seconds = inf" in str(err.value) and "finite" in str(err.value)


def test_values_at_the_bounds_are_accepted() -> None:
    config = parse_config(
        "service:\n  max_concurrent_actions: 256\n  poll_interval_seconds: 86400\n  http:\n    port: 65535\n"
        "defaults:\n  compaction:\n    hoodie.compact.inline.max.delta.commits: 100000\n"
        "    hoodie.parquet.max.file.size: 1099511627776\n"
    )
    assert config.service.max_concurrent_actions == 256
    assert config.service.http.port == 65535
    assert config.defaults.compaction.policy().max_delta_commits == 100_000


def _numeric(annotation: Any) -> bool:
    members = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else ()
    return annotation in (int, float) or any(m in (int, float) for m in members)


@pytest.mark.parametrize(
    "model",
    [
        ServiceSettings,
        RetrySettings,
        HttpSettings,
        DiscoveryRoot,
        LockSettings,
        CompactionPolicy,
        ClusteringPolicy,
        CleanPolicy,
        ArchivalPolicy,
        MetadataPolicy,
        WritePolicy,
        SloSettings,
        GroupSettings,
        BackoffSettings,
    ],
)
def test_every_numeric_field_has_an_upper_bound(model: type[BaseModel]) -> None:
    unbounded = [
        name
        for name, info in model.model_fields.items()
        if _numeric(info.annotation)
        and not any(isinstance(m, annotated_types.Le | annotated_types.Lt) for m in info.metadata)
    ]
    assert unbounded == []


def test_example_and_chart_values_still_load(tmp_path: Path) -> None:
    example = load_config(str(REPO / "config.example.yaml"), env={})
    assert example.service.max_concurrent_actions == 2
    values = yaml.safe_load((REPO / "helm" / "tableservice" / "values.yaml").read_text())
    chart = parse_config(yaml.safe_dump(values["config"]))
    assert chart.service.log.format == "json"
    for text in (REPO / "README.md").read_text().split("```yaml")[1:]:  # the README's chart values
        for document in yaml.safe_load_all(text.split("```")[0]):
            assert parse_config(yaml.safe_dump(document["config"])).tables
