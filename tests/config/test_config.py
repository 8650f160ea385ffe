"""The daemon's configuration: the example file, validation errors, environment overrides, discovery, merging
and reload diffs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tableservice.config import (
    CompactionPolicySettings,
    ConfigValidationError,
    DaemonConfig,
    LockSettings,
    TableEntry,
    diff_tables,
    discover_tables,
    hoodie_table_name,
    load_config,
    named_tables,
    parse_config,
    set_policy_validator,
)
from tableservice.config.schema import Loc, iter_key_paths, resolve
from tableservice.errors import ConfigError
from tableservice.hudi.table.config import TableType
from tableservice.planning.compaction.policy import CompactionPolicy, CompactionStrategyName, CompactionTriggerStrategy
from tableservice.planning.write import WritePolicy
from tableservice.storage import FileInfo, Storage
from tableservice.storage.requests import counting
from tests.support.fixtures import REPO
from tests.support.trip_tables import create_trip_table

EXAMPLE = REPO / "config.example.yaml"


# --- the example file --------------------------------------------------------------------------------------------


def test_example_loads_with_documented_values() -> None:
    config = load_config(str(EXAMPLE), env={})
    assert config.service.poll_interval_seconds == 30
    assert config.service.http.host == "127.0.0.1"
    assert config.service.http.port == 9464
    assert config.spark.master == "local[*]" and config.spark.remote is None
    assert config.spark.conf == {"spark.sql.shuffle.partitions": "8"}
    assert config.locks.kind == "in-process"
    assert [t.uri for t in config.tables] == ["s3://my-bucket/warehouse/trips"]
    trips = config.tables[0]
    assert config.effective_policy(trips).compaction.policy().max_delta_commits == 10
    assert config.effective_locks(trips).zookeeper_lock_key == "trips"
    assert config.discovery[0].root == "s3://my-bucket/lake"
    assert config.discovery[0].exclude == ["**/_tmp*"]


def test_example_shows_the_defaults() -> None:
    """Every value the example gives for the global sections is the model's default."""
    example = load_config(str(EXAMPLE), env={})
    default = DaemonConfig()
    assert example.service == default.service
    assert example.storage == default.storage
    assert example.locks == default.locks
    assert example.spark.model_dump(exclude={"conf"}) == default.spark.model_dump(exclude={"conf"})
    section = example.defaults.compaction
    assert (section.enabled, section.schedule, section.execute) == (True, True, True)
    # The Hudi keys it spells out are planning's defaults, one by one.
    assert section.policy() == CompactionPolicy()
    unset = {"tableservice.compaction.log.bytes.threshold", "hoodie.memory.compaction.max.size"}  # null: off
    assert set(section.hudi_options()) | unset == set(CompactionPolicySettings.config_extra_keys())


def _documented(data: Any, loc: Loc = ()) -> Iterator[Loc]:
    if isinstance(data, Mapping):
        for key, value in data.items():
            yield (*loc, key)
            yield from _documented(value, (*loc, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _documented(value, (*loc, i))


def _at_zero(loc: Loc) -> Loc:
    return tuple(0 if isinstance(k, int) else k for k in loc)


def test_example_documents_every_key_and_only_model_keys() -> None:
    raw = yaml.safe_load(EXAMPLE.read_text())
    documented = {_at_zero(loc) for loc in _documented(raw)}
    unknown = sorted(str(loc) for loc in documented if resolve(DaemonConfig, loc) is None)
    assert unknown == []
    missing = sorted(str(loc) for loc, _ in iter_key_paths(DaemonConfig) if loc not in documented)
    assert missing == []
    # Sanity: the walk covers nested sections, Hudi's dotted keys and list entries.
    paths = {loc for loc, _ in iter_key_paths(DaemonConfig)}
    assert ("service", "retry", "quarantine_after_failures") in paths
    assert ("locks", "hoodie.write.lock.zookeeper.lock_key") in paths
    assert ("defaults", "compaction", "hoodie.compact.inline.max.delta.commits") in paths
    assert ("discovery", 0, "max_depth") in paths


def test_empty_file_is_all_defaults() -> None:
    assert parse_config("") == DaemonConfig()
    assert parse_config("# nothing\n").tables == []


def test_log_levels_take_either_spelling() -> None:
    log = parse_config("service:\n  log: {level: warning, format: JSON, spark_level: warning}\n").service.log
    assert (log.level, log.format, log.spark_level) == ("WARNING", "json", "WARN")
    assert DaemonConfig().service.log.spark_level == "WARN"
    assert parse_config("service:\n  log: {spark_level: error}\n").service.log.spark_level == "ERROR"


# --- bad configurations ------------------------------------------------------------------------------------------

BAD: list[tuple[str, str, dict[str, str], list[str]]] = [
    ("unknown key", "service:\n  poll_intervall_seconds: 5\n", {}, [
        "service.poll_intervall_seconds = 5", "line 2", "did you mean 'poll_interval_seconds'"]),
    ("unknown top-level section", "servce:\n  x: 1\n", {}, ["servce", "did you mean 'service'"]),
    ("wrong type", "service:\n  max_concurrent_actions: many\n", {}, [
        "service.max_concurrent_actions = 'many'", "integer"]),
    ("negative interval", "service:\n  poll_interval_seconds: -1\n", {}, [
        "service.poll_interval_seconds = -1", "greater than 0"]),
    ("jitter out of range", "service:\n  poll_jitter: 1.5\n", {}, ["service.poll_jitter = 1.5"]),
    ("bad spark log level", "service:\n  log:\n    spark_level: LOUD\n", {}, ["service.log.spark_level = 'LOUD'"]),
    ("backoff order", "service:\n  retry:\n    initial_backoff_seconds: 100\n    max_backoff_seconds: 10\n", {}, [
        "service.retry.max_backoff_seconds", "at least initial_backoff_seconds"]),
    ("master and remote", "spark:\n  master: local[2]\n  remote: sc://spark:15002\n", {}, [
        "spark.remote = 'sc://spark:15002'", "spark.master and spark.remote are mutually exclusive"]),
    ("connect URL as master", "spark:\n  master: sc://spark:15002\n", {}, ["spark.master", "spark.remote"]),
    ("spark conf key", "spark:\n  conf:\n    executor.memory: 4g\n", {}, [
        "spark.conf.executor.memory = '4g'", "start with 'spark.'"]),
    ("zero storage timeout", "storage:\n  request_timeout_seconds: 0\n", {}, [
        "storage.request_timeout_seconds = 0", "greater than 0"]),
    ("unknown list client", "storage:\n  list_client: boto3\n", {}, ["storage.list_client = 'boto3'", "native"]),
    ("secret in storage", "storage:\n  secret_access_key: hunter2\n", {}, [
        "storage.secret_access_key", "AWS_SECRET_ACCESS_KEY"]),
    ("secret in spark conf", "spark:\n  conf:\n    spark.hadoop.fs.s3a.access.key: AKIAABCDEFGHIJKLMNOP\n", {}, [
        "spark.conf.spark.hadoop.fs.s3a.access.key", "AWS_ACCESS_KEY_ID"]),
    ("bad lock provider", "locks:\n  hoodie.write.lock.provider: etcd\n", {}, [
        "locks.hoodie.write.lock.provider = 'etcd'", "in-process, zookeeper, dynamodb"]),
    ("unsupported lock provider",
     "locks:\n  hoodie.write.lock.provider: org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider\n",
     {}, ["locks.hoodie.write.lock.provider", "not supported"]),
    ("zookeeper without url", "locks:\n  hoodie.write.lock.provider: zookeeper\n", {}, [
        "locks.hoodie.write.lock.zookeeper.url", "locks.hoodie.write.lock.zookeeper.base_path", "required when"]),
    ("bad YAML", "service:\n  poll_interval_seconds: 5\n   bad: [\n", {}, ["YAML syntax error at line 3"]),
    ("duplicate key", "service:\n  poll_jitter: 0.1\n  poll_jitter: 0.2\n", {}, [
        "service.poll_jitter", "duplicate key at line 3 (first at line 2)"]),
    ("table without uri", "tables:\n  - uri: /data/a\n  - name: b\n", {}, ["tables[1].uri", "required key is missing"]),
    ("table listed twice", "tables:\n  - uri: s3://b/t\n  - uri: s3a://b/t/\n", {}, [
        "tables[1].uri = 's3://b/t'", "also listed as tables[0]"]),
    ("bad Hudi value in a table",
     "tables:\n  - uri: /a\n  - uri: /b\n  - uri: /c\n    policy:\n      compaction:\n"
     "        hoodie.compact.inline.max.delta.commits: five\n",
     {}, ["tables[2].policy.compaction.hoodie.compact.inline.max.delta.commits = 'five'", "line 7"]),
    ("mistyped Hudi key", "defaults:\n  compaction:\n    hoodie.compact.inline.max.delta.comits: 3\n", {}, [
        "defaults.compaction.hoodie.compact.inline.max.delta.comits", "hoodie.compact.inline.max.delta.commits"]),
    ("lock key among compaction keys", "defaults:\n  compaction:\n    hoodie.write.lock.provider: zookeeper\n", {}, [
        "defaults.compaction.hoodie.write.lock.provider", "lock keys go in `locks`"]),
    ("mistyped clean key", "defaults:\n  clean:\n    hoodie.clean.commits.retained: 10\n", {}, [
        "defaults.clean.hoodie.clean.commits.retained", "did you mean 'hoodie.cleaner.commits.retained'"]),
    ("mistyped per-table lock key",
     "tables:\n  - uri: /a\n    locks:\n      hoodie.write.lock.zookeeper.lock_kee: t\n", {}, [
        "tables[0].locks.hoodie.write.lock.zookeeper.lock_kee", "did you mean 'hoodie.write.lock.zookeeper.lock_key'"]),
    ("mistyped write key", "defaults:\n  write:\n    hoodie.parquet.bloom.filter.enable: false\n", {}, [
        "defaults.write.hoodie.parquet.bloom.filter.enable", "did you mean 'hoodie.parquet.bloom.filter.enabled'"]),
    ("unwritable codec",
     "tables:\n  - uri: /a\n    policy:\n      write:\n        hoodie.parquet.compression.codec: lzo\n", {}, [
        "tables[0].policy.write.hoodie.parquet.compression.codec = 'lzo'", "LZO is not written", "line 5"]),
    ("switch on the write section", "defaults:\n  write:\n    enabled: false\n", {}, [
        "defaults.write.enabled", "unknown key"]),
    ("bad glob", "discovery:\n  - root: /lake\n    include: ['[abc']\n", {}, [
        "discovery[0].include[0] = '[abc'", "glob"]),
    ("bad env override: unknown key", "", {"TABLESERVICE__SERVICE__POLL_INTERVAL": "5"}, [
        "service.POLL_INTERVAL", "TABLESERVICE__SERVICE__POLL_INTERVAL", "did you mean 'poll_interval_seconds'"]),
    ("bad env override: wrong type", "", {"TABLESERVICE__SERVICE__HTTP__PORT": "http"}, [
        "service.http.port = 'http'", "environment variable TABLESERVICE__SERVICE__HTTP__PORT"]),
    ("bad env override: no such table", "tables:\n  - uri: /a\n", {"TABLESERVICE__TABLES__3__NAME": "x"}, [
        "tables[3]", "the list has 1 entries"]),
    ("bad env override: no tables at all", "", {"TABLESERVICE__TABLES__0__NAME": "x"}, [
        "tables[0]", "the list has 0 entries"]),
    ("bad env override: secret", "", {"TABLESERVICE__STORAGE__AWS_SECRET_ACCESS_KEY": "hunter2"}, [
        "TABLESERVICE__STORAGE__AWS_SECRET_ACCESS_KEY", "never go in the configuration"]),
]  # fmt: skip


@pytest.mark.parametrize(("text", "env", "expected"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_config_names_key_and_value(text: str, env: dict[str, str], expected: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, source="daemon.yaml", env=env)
    message = str(info.value)
    for part in expected:
        assert part in message
    assert "file=daemon.yaml" in message
    assert "hunter2" not in message  # secrets are never echoed


def test_every_problem_is_reported_with_its_line() -> None:
    text = "service:\n  poll_interval_seconds: 0\n  max_concurrent_actions: 0\nspark:\n  app_name: ''\n"
    with pytest.raises(ConfigValidationError) as info:
        parse_config(text)
    assert [(i.path, i.value) for i in info.value.issues] == [
        ("service.poll_interval_seconds", 0),
        ("service.max_concurrent_actions", 0),
        ("spark.app_name", ""),
    ]
    message = str(info.value)
    assert message.startswith("3 problems in the configuration:")
    assert "(line 2)" in message and "(line 3)" in message and "(line 5)" in message


def test_load_config_reports_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="configuration file not found"):
        load_config(str(tmp_path / "absent.yaml"), env={})


# --- environment overrides ---------------------------------------------------------------------------------------


def test_env_overrides_every_kind_of_key() -> None:
    text = "tables:\n  - uri: /data/a\n    name: a\nspark:\n  conf:\n    spark.executor.memory: 2g\n"
    env = {
        "TABLESERVICE__SERVICE__HTTP__HOST": "0.0.0.0",
        "TABLESERVICE__SERVICE__POLL_INTERVAL_SECONDS": "2.5",
        "TABLESERVICE__DEFAULTS__COMPACTION__HOODIE_COMPACT_INLINE_MAX_DELTA_COMMITS": "12",
        "TABLESERVICE__defaults__compaction__hoodie.compact.inline.trigger.strategy": "NUM_OR_TIME",
        "TABLESERVICE__LOCKS__HOODIE_WRITE_LOCK_WAIT_TIME_MS": "5000",
        "TABLESERVICE__LOCKS__HOODIE_WRITE_LOCK_WAIT_TIME_MS_BETWEEN_RETRY": "250",
        "TABLESERVICE__TABLES__0__POLICY__COMPACTION__ENABLED": "false",
        "TABLESERVICE__SPARK__CONF__SPARK_EXECUTOR_MEMORY": "4g",  # matches the existing key
        "TABLESERVICE__SPARK__CONF__spark.sql.shuffle.partitions": "16",  # new key, verbatim
        "TABLESERVICE__SPARK__APP_NAME": "007",  # text keys stay verbatim
        "TABLESERVICE__DISCOVERY": "[{root: /lake, include: ['sales/*']}]",
        "TABLESERVICE_CONFIG": "/not/an/override",
        "PATH": "/usr/bin",
    }
    config = parse_config(text, env=env)
    assert config.service.http.host == "0.0.0.0"
    assert config.service.poll_interval_seconds == 2.5
    compaction = config.defaults.compaction.policy()
    assert compaction.max_delta_commits == 12
    assert compaction.trigger_strategy is CompactionTriggerStrategy.NUM_OR_TIME
    assert (config.locks.wait_time_ms, config.locks.wait_time_ms_between_retry) == (5000, 250)
    assert config.effective_policy("/data/a").compaction.enabled is False
    assert config.spark.conf == {"spark.executor.memory": "4g", "spark.sql.shuffle.partitions": "16"}
    assert config.spark.app_name == "007"
    assert [(d.root, d.include) for d in config.discovery] == [("/lake", ["sales/*"])]


def test_env_specific_beats_section_and_empty_means_default() -> None:
    env = {
        "TABLESERVICE__SERVICE": "{poll_jitter: 0.5, http: {port: 1000}}",
        "TABLESERVICE__SERVICE__HTTP__PORT": "2000",
        "TABLESERVICE__SERVICE__MAX_CONCURRENT_ACTIONS": "",
    }
    config = parse_config("service:\n  max_concurrent_actions: 7\n", env=env)
    assert config.service.poll_jitter == 0.5
    assert config.service.http.port == 2000
    assert config.service.max_concurrent_actions == 2


def test_load_config_reads_os_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "daemon.yaml"
    path.write_text("service:\n  http:\n    port: 9000\n")
    monkeypatch.setenv("TABLESERVICE__SERVICE__HTTP__PORT", "9100")
    assert load_config(str(path)).service.http.port == 9100
    assert load_config(str(path), env={}).service.http.port == 9000


def test_relative_table_paths_resolve_against_the_config_folder(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "daemon.yaml"
    path.parent.mkdir()
    path.write_text("tables:\n  - uri: ../tables/trips/\ndiscovery:\n  - root: lake\n")
    config = load_config(str(path), env={})
    assert config.tables[0].uri == str(tmp_path / "tables" / "trips")
    assert config.discovery[0].root == str(tmp_path / "conf" / "lake")


# --- discovery -----------------------------------------------------------------------------------------------


def _make_tree(storage: Storage, root: str) -> None:
    def table(rel: str, name: str = "hoodie.properties") -> None:
        storage.write_bytes(f"{root}/{rel}/.hoodie/{name}", b"hoodie.table.name=x\n")

    table("sales/orders")
    storage.write_bytes(f"{root}/sales/orders/2024/01/part.parquet", b"x")
    table("sales/orders/2024/nested")  # inside a table: never found
    table("sales/returns", "hoodie.properties.backup")  # mid-update of the properties: still a table
    table("ops/tmp_scratch")
    table("ops/logs")
    table("_staging/t")  # hidden (Hadoop convention)
    table(".trash/t")  # hidden
    table("a/b/c/too_deep")  # depth 4
    storage.write_bytes(f"{root}/ops/not_a_table/.hoodie/other.file", b"x")  # no properties file
    storage.write_bytes(f"{root}/empty/readme.txt", b"x")


class CountingStorage(Storage):
    def __init__(self, inner: Storage) -> None:
        super().__init__(inner.options)
        self.listed: list[str] = []

    def list(self, location: str, *, recursive: bool = False, temp_files: bool = False) -> list[FileInfo]:
        assert not recursive
        self.listed.append(location)
        return super().list(location, recursive=recursive, temp_files=temp_files)


def _check_discovery(storage: Storage, root: str) -> None:
    counting = CountingStorage(storage)
    found = discover_tables(counting, root, max_depth=3)
    assert found == [f"{root}/ops/logs", f"{root}/ops/tmp_scratch", f"{root}/sales/orders", f"{root}/sales/returns"]
    # One listing per folder; tables, their partitions and hidden folders are never listed.
    assert len(counting.listed) == len(set(counting.listed))
    assert not any("/sales/orders/" in loc or "_staging" in loc or ".trash" in loc for loc in counting.listed)
    assert f"{root}/a/b" in counting.listed and f"{root}/a/b/c" not in counting.listed  # depth 3: looked up only

    assert discover_tables(storage, root, max_depth=4)[0] == f"{root}/a/b/c/too_deep"
    assert discover_tables(storage, root, include=["sales/*"]) == [f"{root}/sales/orders", f"{root}/sales/returns"]
    assert discover_tables(storage, root, exclude=["**/tmp_*", "sales"]) == [f"{root}/ops/logs"]
    assert discover_tables(storage, root, include=["**/logs"]) == [f"{root}/ops/logs"]
    assert discover_tables(storage, root, max_depth=1) == []
    assert discover_tables(storage, f"{root}/sales/orders") == [f"{root}/sales/orders"]  # the root is a table
    assert discover_tables(storage, f"{root}/absent") == []


def test_discovery_on_local_folders(tmp_path: Path) -> None:
    storage = Storage()
    root = str(tmp_path / "lake")
    _make_tree(storage, root)
    _check_discovery(storage, root)


@pytest.mark.moto
def test_discovery_on_s3(s3_bucket: tuple[Storage, str]) -> None:
    storage, bucket = s3_bucket
    root = f"{bucket}/lake"
    _make_tree(storage, root)
    _check_discovery(storage, root)


@pytest.mark.moto
def test_discovery_reads_each_new_table_once_and_served_ones_never(s3_bucket: tuple[Storage, str]) -> None:
    """A table found costs one GET (its hoodie.properties, which also names it); a rescan finds the tables served
    now without a request; a folder that is no table costs a GET that misses and its listing."""
    storage, bucket = s3_bucket
    root = f"{bucket}/lake"
    names = {f"{root}/t{i}": f"trips_{i}" for i in range(3)}
    for uri, name in names.items():
        create_trip_table(uri, (6, 8, 9)[int(uri[-1])], TableType.COPY_ON_WRITE, name=name, storage=storage)
    storage.write_bytes(f"{root}/docs/readme.txt", b"x")
    config = parse_config(f"discovery:\n  - root: {root}\n")

    properties: dict[str, bytes] = {}
    with counting() as tally:
        entries = config.resolve_tables(storage, properties=properties)
        named, clashes = named_tables(entries, hoodie_table_name(storage, properties))
    assert not clashes
    assert {e.uri: e.name for e in named} == names
    # root and docs: a GET that misses and a listing each; each table: one GET and nothing more
    assert tally.counts() == {"GET": 5, "LIST": 2}

    with counting() as rescan:
        again = config.resolve_tables(storage, known=list(names))
        renamed, _ = named_tables(again, hoodie_table_name(storage), taken={v: k for k, v in names.items()})
    assert {e.uri: e.name for e in renamed} == names
    assert rescan.counts() == {"GET": 2, "LIST": 2}


def test_resolve_tables_adds_discovered_ones(tmp_path: Path) -> None:
    storage = Storage()
    root = str(tmp_path / "lake")
    _make_tree(storage, root)
    text = (
        f"tables:\n  - uri: {root}/sales/orders/\n    policy:\n      compaction:\n        execute: false\n"
        f"discovery:\n  - root: {root}\n    include: ['sales/*']\n"
    )
    config = parse_config(text)
    entries = config.resolve_tables(storage)
    assert [e.uri for e in entries] == [f"{root}/sales/orders", f"{root}/sales/returns"]
    assert config.effective_policy(entries[0]).compaction.executes is False
    assert config.effective_policy(entries[1]) == config.defaults


# --- merging -------------------------------------------------------------------------------------------------


MERGE = """
locks:
  hoodie.write.lock.provider: zookeeper
  hoodie.write.lock.zookeeper.url: zk-0,zk-1:2182
  hoodie.write.lock.zookeeper.port: 2181
  hoodie.write.lock.zookeeper.base_path: /hudi/locks
defaults:
  compaction:
    schedule: true
    hoodie.compact.inline.max.delta.commits: 4
    hoodie.compaction.strategy: UnBoundedCompactionStrategy
tables:
  - uri: s3://lake/orders
    name: orders
    policy:
      compaction:
        schedule: false
        hoodie.compact.inline.max.delta.commits: 9
        hoodie.compaction.strategy: null
    locks:
      hoodie.write.lock.zookeeper.lock_key: orders_lock
  - uri: s3://lake/users
    locks:
      hoodie.write.lock.provider: dynamodb
      hoodie.write.lock.dynamodb.table: hudi_locks
"""


def test_effective_policy_merges_defaults_and_overrides() -> None:
    config = parse_config(MERGE)
    orders = config.effective_policy("s3a://lake/orders/").compaction
    assert orders.hudi_options()["hoodie.compact.inline.max.delta.commits"] == 9
    # null inherits the default's value (the strategy, normalised to Hudi's class name)
    assert orders.policy().strategy is CompactionStrategyName.UNBOUNDED
    assert orders.policy().enabled is False  # schedule: false -> planning does not schedule
    assert orders.executes is True
    users = config.effective_policy("s3://lake/users").compaction
    assert users.policy().max_delta_commits == 4 and users.policy().enabled is True
    assert config.effective_policy("s3://lake/unlisted") == config.defaults


def test_effective_locks_merge_per_table() -> None:
    config = parse_config(MERGE)
    orders = config.effective_locks("s3://lake/orders")
    assert orders.kind == "zookeeper"
    assert orders.zookeeper_lock_path("ignored") == "/hudi/locks/orders_lock"
    assert orders.zookeeper_connect_string() == "zk-0:2181,zk-1:2182"
    users = config.effective_locks("s3://lake/users")
    assert users.kind == "dynamodb"
    assert users.provider == "org.apache.hudi.aws.transaction.lock.DynamoDBBasedLockProvider"
    props = users.hudi_properties("users")
    assert props["hoodie.write.lock.dynamodb.partition_key"] == "users"
    assert props["hoodie.write.lock.dynamodb.billing_mode"] == "PAY_PER_REQUEST"
    assert config.effective_locks("s3://lake/unlisted") == config.locks
    assert config.locks.zookeeper_lock_path("trips") == "/hudi/locks/trips"


def test_per_table_lock_override_is_validated_as_a_whole() -> None:
    text = "tables:\n  - uri: /a\n    locks:\n      hoodie.write.lock.provider: dynamodb\n"
    with pytest.raises(ConfigError, match=r"tables\[0\]\.locks\.hoodie\.write\.lock\.dynamodb\.table.*required"):
        parse_config(text)


def test_policy_validator_hook_replaces_the_builtin_check() -> None:
    seen: list[dict[str, Any]] = []

    def validator(values: Mapping[str, Any]) -> Mapping[str, Any]:
        seen.append(dict(values))
        if values.get("hoodie.compact.inline.max.delta.commits") == 13:
            raise ValueError("unlucky")
        return {k: str(v) for k, v in values.items()}

    set_policy_validator("compaction", validator, known_keys=["hoodie.compact.inline.max.delta.commits"])
    try:
        config = parse_config("defaults:\n  compaction:\n    hoodie.compact.inline.max.delta.commits: 3\n")
        assert config.defaults.compaction.hudi_options() == {"hoodie.compact.inline.max.delta.commits": "3"}
        assert seen == [{"hoodie.compact.inline.max.delta.commits": 3}]
        with pytest.raises(ConfigError, match=r"defaults\.compaction.*unlucky"):
            parse_config("defaults:\n  compaction:\n    hoodie.compact.inline.max.delta.commits: 13\n")
        with pytest.raises(ConfigError, match="did you mean"):
            parse_config("defaults:\n  compaction:\n    hoodie.compact.inline.max.delta.commit: 3\n")
    finally:
        set_policy_validator("compaction", None)
    restored = parse_config("defaults:\n  compaction:\n    hoodie.compact.inline.max.delta.commits: 3\n")
    assert restored.defaults.compaction.hudi_options() == {"hoodie.compact.inline.max.delta.commits": 3}


# --- reload ----------------------------------------------------------------------------------------------------


def test_reloaded_identical_config_is_equal() -> None:
    a, b = parse_config(MERGE), parse_config(MERGE + "\n# a comment\n")
    assert a == b
    assert a.config_fingerprint() == b.config_fingerprint()
    c = parse_config(MERGE.replace("max.delta.commits: 9", "max.delta.commits: 8"))
    assert c != a and c.config_fingerprint() != a.config_fingerprint()


def test_diff_tables_added_removed_changed() -> None:
    old = parse_config(MERGE)
    new_text = MERGE.replace("max.delta.commits: 9", "max.delta.commits: 8").replace(
        "  - uri: s3://lake/users\n", "  - uri: s3://lake/items\n"
    )
    new = parse_config(new_text)
    assert diff_tables(old, new) == (["s3://lake/items"], ["s3://lake/users"], ["s3://lake/orders"])
    assert diff_tables(old, old) == ([], [], [])
    # A change of `defaults` changes every table it reaches, discovered ones included.
    wider = parse_config(MERGE.replace("max.delta.commits: 4", "max.delta.commits: 6"))
    diff = diff_tables(old, wider, old_discovered=["s3://lake/found"], new_discovered=["s3a://lake/found/"])
    assert diff.added == [] and diff.removed == []
    assert diff.changed == ["s3://lake/found", "s3://lake/users"]  # orders overrides the key itself
    assert diff_tables(old, old, new_discovered=["s3://lake/found"]).added == ["s3://lake/found"]


def test_table_fingerprint_covers_name_policy_and_locks() -> None:
    config = parse_config(MERGE)
    renamed = parse_config(MERGE.replace("name: orders", "name: orders_v2"))
    relocked = parse_config(MERGE.replace("lock_key: orders_lock", "lock_key: other"))
    base = config.table_fingerprint("s3://lake/orders")
    assert renamed.table_fingerprint("s3://lake/orders") != base
    assert relocked.table_fingerprint("s3://lake/orders") != base
    assert config.table_fingerprint(TableEntry.model_validate({"uri": "s3://lake/users"})) != base
    assert isinstance(config.effective_locks("s3://lake/orders"), LockSettings)


def test_every_policy_section_takes_its_policys_ignored_keys_and_alternative_spellings() -> None:
    """A section accepts what its planning policy accepts: writer-side keys it ignores (as given) and alternative
    spellings (normalised to Hudi's key); keys that belong to another section stay refused there."""
    config = parse_config(
        "defaults:\n"
        "  clean:\n"
        "    hoodie.clean.async: true\n"
        "    hoodie.clean.delete.bootstrap.base.file: true\n"
        "    hoodie.cleaner.commits.retained: 4\n"
        "  clustering:\n"
        "    hoodie.clustering.async.enabled: true\n"
    )
    clean = config.defaults.clean
    assert clean.hudi_options() == {
        "hoodie.clean.async": True,
        "hoodie.cleaner.delete.bootstrap.base.file": True,
        "hoodie.cleaner.commits.retained": 4,
    }
    assert (clean.policy().commits_retained, clean.policy().delete_bootstrap_base_file) == (4, True)
    assert config.defaults.clustering.hudi_options() == {"hoodie.clustering.async.enabled": True}
    with pytest.raises(ConfigError, match=r"hoodie\.cleaner\.policy\.failed\.writes"):
        parse_config("defaults:\n  clean:\n    hoodie.cleaner.policy.failed.writes: EAGER\n")
    with pytest.raises(ConfigError, match=r"hoodie\.cleaner\.commits\.retained"):
        parse_config("defaults:\n  archival:\n    hoodie.cleaner.commits.retained: 3\n")


def test_storage_settings_reach_the_storage_options(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "storage:\n  endpoint_url: http://127.0.0.1:9000\n  connect_timeout_seconds: 2\n"
        "  request_timeout_seconds: 12.5\n  list_client: pyarrow\n"
    )
    options = load_config(str(cfg)).storage.options(env={})
    assert (options.endpoint_url, options.connect_timeout_s, options.request_timeout_s, options.list_client) == (
        "http://127.0.0.1:9000",
        2.0,
        12.5,
        "pyarrow",
    )
    # what Spark tasks get: the endpoint and every setting that differs from the defaults, never credentials
    assert options.shareable() == {
        "endpoint_url": "http://127.0.0.1:9000",
        "connect_timeout_s": 2.0,
        "request_timeout_s": 12.5,
        "list_client": "pyarrow",
    }


def test_write_keys_reach_each_tables_settings() -> None:
    """`defaults.write` applies to every table, a table's own `policy.write` keys override it key by key."""
    from tableservice.hudi.file_group.bloom import BloomFilterSettings, BloomFilterTypeCode
    from tableservice.service.wiring import table_settings

    text = (
        "defaults:\n  write:\n    hoodie.parquet.compression.codec: SNAPPY\n    hoodie.index.bloom.num_entries: 1000\n"
        "tables:\n  - uri: /a\n  - uri: /b\n    policy:\n      write:\n"
        "        hoodie.parquet.bloom.filter.enabled: false\n        hoodie.parquet.compression.codec: zstd\n"
    )
    config = parse_config(text)
    a, b = (table_settings(config, entry).write for entry in config.tables)
    assert (a.compression_codec, a.bloom_filter(True)) == (
        "snappy",
        BloomFilterSettings(1000, 1e-9, BloomFilterTypeCode.DYNAMIC_V0, 100000),
    )
    assert (b.compression_codec, b.bloom_num_entries, b.bloom_filter(True)) == ("zstd", 1000, None)
    plain = parse_config("tables:\n  - uri: /c\n")
    assert table_settings(plain, plain.tables[0]).write == WritePolicy()


def test_service_names_are_the_service_sections() -> None:
    """`slo` and `write` configure a table, not a service: they are not among the services, nor their sections."""
    from tableservice.config.policy import PolicySet

    policies = PolicySet()
    names = ["compaction", "clustering", "clean", "archival", "failed_writes", "metadata", "indexing"]
    assert policies.service_names() == names
    assert [policies.section(n).service for n in names] == names
    for other in ("slo", "write"):
        with pytest.raises(KeyError):
            policies.section(other)
