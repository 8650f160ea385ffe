"""From the daemon's configuration to the objects that serve it: storage options, lock providers (one per distinct
lock configuration, shared by the tables that use it), Spark settings, each table's settings, and the bearer
token of the HTTP endpoint."""

from __future__ import annotations

import logging
from collections.abc import Callable

from tableservice.config import (
    DaemonConfig,
    HttpSettings,
    LogSettings,
    NameClash,
    TableEntry,
    TableServiceManagerSettings,
    hoodie_table_name,
    named_tables,
)
from tableservice.config.locks import LockSettings
from tableservice.errors import ConfigError
from tableservice.executors.jvm_output import log4j_level
from tableservice.executors.spark import SparkSettings as ExecutorSparkSettings
from tableservice.hudi.timeline.failed_writes import FailedWritesPolicy
from tableservice.locks import InProcessLockProvider, LockProvider
from tableservice.service.protocol import ServiceSettings
from tableservice.service.rollback import FailedWritesSettings
from tableservice.service.table_state import TableSettings
from tableservice.storage import Storage, StorageOptions

log = logging.getLogger(__name__)


def storage_options(config: DaemonConfig) -> StorageOptions:
    return config.storage.options()


def lock_provider(settings: LockSettings) -> LockProvider:
    kind = settings.kind
    if kind == "in-process":
        return InProcessLockProvider()
    if kind == "dynamodb":
        from tableservice.locks.dynamodb import DynamoDBLockProvider

        return DynamoDBLockProvider(settings)
    if kind == "zookeeper":
        from tableservice.locks.zookeeper import ZookeeperLockProvider

        return ZookeeperLockProvider(settings)
    raise ConfigError(
        f"locks.hoodie.write.lock.provider={settings.provider!r}: this build serves the in-process lock only"
    )


class LockProviders:
    """One lock provider per distinct lock settings. A table whose `locks` override names another lock key,
    ZooKeeper ensemble, DynamoDB table or backend then takes exactly the lock its writers take."""

    def __init__(self) -> None:
        self._by_settings: dict[str, LockProvider] = {}

    def for_table(self, config: DaemonConfig, table: TableEntry | str) -> LockProvider:
        settings = config.effective_locks(table)
        key = settings.model_dump_json(by_alias=True)
        if key not in self._by_settings:
            self._by_settings[key] = lock_provider(settings)
        return self._by_settings[key]

    def close(self) -> None:
        """Close every provider, even when one of them fails to."""
        for provider in self._by_settings.values():
            try:
                provider.close()
            except Exception as e:  # the others must still be released
                log.error("could not close lock provider %s: %s", provider.name, e)
        self._by_settings.clear()


def status_token(settings: HttpSettings) -> str | None:
    """The bearer token /status requires, read from `service.http.status_token_file`; None when not set."""
    path = settings.status_token_file
    return None if path is None else token_from_file(path, "service.http.status_token_file")


def tsm_token(settings: TableServiceManagerSettings) -> str | None:
    """The token of the table-service-manager endpoint (`service.table_service_manager.token_file`)."""
    path = settings.token_file
    return None if path is None else token_from_file(path, "service.table_service_manager.token_file")


def token_from_file(path: str, key: str) -> str:
    """One token read from `path` (a mounted Kubernetes Secret, say); ConfigError naming `key` otherwise."""
    try:
        with open(path, encoding="ascii") as file:
            token = file.read(4097).strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{key}: cannot read the bearer token from {path}: {e}") from e
    if not token or len(token) > 4096 or any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigError(f"{key}: {path} must hold one bearer token (1 to 4096 printable characters, no spaces)")
    return token


def executor_settings(config: DaemonConfig) -> ExecutorSparkSettings:
    s = config.spark
    log_settings = config.service.log
    return ExecutorSparkSettings(
        master=None if s.remote else (s.master or "local[*]"),
        remote=s.remote,
        app_name=s.app_name,
        conf=dict(s.conf),
        jvm_log_level=log4j_level(log_settings.spark_level, log_settings.level),
        local_jvm_nice=s.local_jvm_nice,
    )


def table_settings(config: DaemonConfig, entry: TableEntry) -> TableSettings:
    policies = config.effective_policy(entry)
    compaction, clustering, clean = policies.compaction, policies.clustering, policies.clean
    policy, interval_ms, misses = policies.failed_writes.settings()
    return TableSettings(
        uri=entry.uri,
        name=entry.name,
        compaction=ServiceSettings(
            compaction.policy(), schedule=compaction.enabled and compaction.schedule, execute=compaction.executes
        ),
        clustering=ServiceSettings(
            clustering.policy(), schedule=clustering.enabled and clustering.schedule, execute=clustering.executes
        ),
        clean=ServiceSettings(clean.policy(), schedule=clean.enabled and clean.schedule, execute=clean.executes),
        archival=ServiceSettings(
            policies.archival.policy(clean, compaction),
            schedule=policies.archival.enabled,
            execute=policies.archival.enabled,
        ),
        failed_writes=ServiceSettings(
            FailedWritesSettings(FailedWritesPolicy(policy), interval_ms, misses), schedule=False
        ),
        metadata=ServiceSettings(
            policies.metadata.policy(), schedule=policies.metadata.enabled, execute=policies.metadata.enabled
        ),
        verify_metadata_after_action=policies.metadata.verify_after_action,
        indexing=ServiceSettings(
            policies.indexing.policy(),
            schedule=policies.indexing.enabled and policies.indexing.schedule,
            execute=policies.indexing.enabled and policies.indexing.execute,
        ),
        secondary_indexes=dict(policies.indexing.secondary_indexes),
        # Twice Hudi's wait: long enough to take over from a holder whose lease ran out (DynamoDB).
        lock_timeout_s=2 * config.effective_locks(entry).wait_time_ms / 1000,
        permanent_failure_hold_s=config.service.retry.quarantine_seconds,
        paused=entry.paused,
        paused_reason=entry.paused_reason,
        slo=policies.slo.targets(),
        slo_margin_s=config.service.poll_interval_seconds,
        write=policies.write.policy(),
    )


def named_entries(
    config: DaemonConfig, storage: Storage, registered: list[TableEntry], taken: dict[str, str] | None = None
) -> tuple[list[TableEntry], list[NameClash]]:
    """The tables `config` lists and discovers, and those Hudi writers `registered` (default policies), each with
    its one name (`config.identity`); `taken`: names kept by the tables served now (a rescan finds them again without
    a request). A registered table whose name
    clashes is left out with an error logged (a writer's registration never stops the daemon); other clashes are
    returned."""
    properties: dict[str, bytes] = {}  # read by discovery: each new table's name without a second read
    entries = config.resolve_tables(storage, known=(taken or {}).values(), properties=properties)
    listed = {e.uri for e in entries}
    extra = [e for e in registered if e.uri not in listed]
    from_writers = {e.uri for e in extra}
    named, clashes = named_tables([*entries, *extra], hoodie_table_name(storage, properties), taken=taken)
    for clash in clashes:
        if clash.uri in from_writers:
            log.error("not serving the registered table %s: %s", clash.uri, clash)
    return named, [c for c in clashes if c.uri not in from_writers]


def apply_log_settings(old: LogSettings, new: LogSettings, apply: Callable[[LogSettings], None] | None) -> None:
    """A reload changed `service.log`: the new level and format go to `apply` (the process's logging); a new
    `spark_level` waits for a restart."""
    if new == old:
        return
    if apply is not None and (new.level, new.format) != (old.level, old.format):
        apply(new)
        log.info("logging now at level %s, format %s", new.level, new.format)
    if new.spark_level != old.spark_level:
        log.warning(
            "service.log.spark_level %s takes effect when the daemon restarts: the JVM's log level is set when "
            "Spark starts",
            new.spark_level,
        )
