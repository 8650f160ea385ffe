"""The `locks` section: the lock the daemon shares with the tables' Hudi writers, in Hudi's own keys.

Key names and defaults follow Apache Hudi's HoodieLockConfig / LockConfiguration and DynamoDbBasedLockConfig,
so the values can be copied from (and to) the writers' configuration. The daemon must take the same lock
as the writers of a table: same provider, same ZooKeeper `base_path`/`lock_key` or DynamoDB `table`/
`partition_key`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tableservice.config.schema import ConfigIssue, ConfigIssues

_P = "hoodie.write.lock."
_ZK = _P + "zookeeper."
_DDB = _P + "dynamodb."

IN_PROCESS = "org.apache.hudi.client.transaction.lock.InProcessLockProvider"
ZOOKEEPER = "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider"
DYNAMODB = "org.apache.hudi.aws.transaction.lock.DynamoDBBasedLockProvider"

LockKind = Literal["in-process", "zookeeper", "dynamodb"]

LOCK_PROVIDERS: dict[str, str] = {"in-process": IN_PROCESS, "zookeeper": ZOOKEEPER, "dynamodb": DYNAMODB}
"""Short names accepted for `hoodie.write.lock.provider`, and the Hudi class each stands for."""

_UNSUPPORTED = {
    "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider": "file-system",
    "org.apache.hudi.hive.transaction.lock.HiveMetastoreBasedLockProvider": "Hive metastore",
    "org.apache.hudi.client.transaction.lock.ZookeeperBasedImplicitBasePathLockProvider": "implicit-path ZooKeeper",
}


# Upper bounds of the lock settings: waits beyond them are unit mistakes (milliseconds taken for seconds);
# DynamoDB's default per-table capacity quota is 40,000 units.
MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DYNAMODB_MAX_CAPACITY = 40_000


class LockSettings(BaseModel):
    """Lock provider and its settings (global `locks`, overridable per table in `tables[i].locks`)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    provider: str = Field(default=IN_PROCESS, alias="hoodie.write.lock.provider")
    wait_time_ms: int = Field(default=60_000, alias="hoodie.write.lock.wait_time_ms", ge=1, le=HOUR_MS)
    num_retries: int = Field(default=15, alias="hoodie.write.lock.num_retries", ge=0, le=1000)
    wait_time_ms_between_retry: int = Field(
        default=1_000, alias="hoodie.write.lock.wait_time_ms_between_retry", ge=1, le=10 * MINUTE_MS
    )
    max_wait_time_ms_between_retry: int = Field(
        default=16_000, alias="hoodie.write.lock.max_wait_time_ms_between_retry", ge=1, le=10 * MINUTE_MS
    )

    zookeeper_url: str | None = Field(default=None, alias="hoodie.write.lock.zookeeper.url", min_length=1)
    zookeeper_port: int | None = Field(default=None, alias="hoodie.write.lock.zookeeper.port", ge=1, le=65535)
    zookeeper_base_path: str | None = Field(default=None, alias="hoodie.write.lock.zookeeper.base_path", min_length=1)
    zookeeper_lock_key: str | None = Field(default=None, alias="hoodie.write.lock.zookeeper.lock_key", min_length=1)
    zookeeper_session_timeout_ms: int = Field(
        default=60_000, alias="hoodie.write.lock.zookeeper.session_timeout_ms", ge=1, le=HOUR_MS
    )
    zookeeper_connection_timeout_ms: int = Field(
        default=15_000, alias="hoodie.write.lock.zookeeper.connection_timeout_ms", ge=1, le=10 * MINUTE_MS
    )

    dynamodb_table: str | None = Field(default=None, alias="hoodie.write.lock.dynamodb.table", min_length=1)
    dynamodb_partition_key: str | None = Field(
        default=None, alias="hoodie.write.lock.dynamodb.partition_key", min_length=1
    )
    dynamodb_region: str | None = Field(default=None, alias="hoodie.write.lock.dynamodb.region", min_length=1)
    dynamodb_endpoint_url: str | None = Field(
        default=None, alias="hoodie.write.lock.dynamodb.endpoint_url", min_length=1
    )
    dynamodb_billing_mode: Literal["PAY_PER_REQUEST", "PROVISIONED"] = Field(
        default="PAY_PER_REQUEST", alias="hoodie.write.lock.dynamodb.billing_mode"
    )
    dynamodb_read_capacity: int = Field(
        default=20, alias="hoodie.write.lock.dynamodb.read_capacity", ge=1, le=DYNAMODB_MAX_CAPACITY
    )
    dynamodb_write_capacity: int = Field(
        default=10, alias="hoodie.write.lock.dynamodb.write_capacity", ge=1, le=DYNAMODB_MAX_CAPACITY
    )
    dynamodb_table_creation_timeout: int = Field(
        default=600_000, alias="hoodie.write.lock.dynamodb.table_creation_timeout", ge=1, le=HOUR_MS
    )

    @field_validator("provider", mode="before")
    @classmethod
    def _provider(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        name = value.strip()
        short = name.lower().replace("_", "-")
        if short in LOCK_PROVIDERS:
            return LOCK_PROVIDERS[short]
        if short == "inprocess":
            return IN_PROCESS
        if name in LOCK_PROVIDERS.values():
            return name
        accepted = ", ".join([*LOCK_PROVIDERS, *LOCK_PROVIDERS.values()])
        if name in _UNSUPPORTED:
            raise ValueError(f"the {_UNSUPPORTED[name]} lock provider is not supported by tableservice; use {accepted}")
        raise ValueError(f"unknown lock provider; use one of {accepted}")

    @field_validator("dynamodb_billing_mode", mode="before")
    @classmethod
    def _billing_mode(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("zookeeper_base_path")
    @classmethod
    def _base_path(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError("a ZooKeeper path starts with '/'")
        return value

    @model_validator(mode="after")
    def _required_for_provider(self) -> LockSettings:
        required: dict[str, list[str]] = {
            ZOOKEEPER: ["zookeeper_url", "zookeeper_base_path"],
            DYNAMODB: ["dynamodb_table"],
        }
        missing = [name for name in required.get(self.provider, []) if getattr(self, name) is None]
        if missing:
            provider = type(self).model_fields["provider"].alias
            raise ConfigIssues(
                [
                    ConfigIssue(
                        (type(self).model_fields[name].alias or name,),
                        f"required when {provider} is {self.kind}",
                    )
                    for name in missing
                ]
            )
        return self

    @property
    def kind(self) -> LockKind:
        for short, cls_name in LOCK_PROVIDERS.items():
            if cls_name == self.provider:
                return short  # type: ignore[return-value]
        raise AssertionError(self.provider)

    def zookeeper_connect_string(self) -> str | None:
        """`url` as ZooKeeper's connect string; `port` is appended to hosts that name none."""
        if self.zookeeper_url is None:
            return None
        if self.zookeeper_port is None:
            return self.zookeeper_url
        hosts, slash, chroot = self.zookeeper_url.partition("/")
        parts = [h if ":" in h else f"{h}:{self.zookeeper_port}" for h in hosts.split(",") if h]
        return ",".join(parts) + slash + chroot

    def zookeeper_lock_path(self, table_name: str) -> str | None:
        """`base_path/lock_key`, the lock key defaulting to the table's name as in Hudi."""
        if self.zookeeper_base_path is None:
            return None
        return self.zookeeper_base_path.rstrip("/") + "/" + (self.zookeeper_lock_key or table_name)

    def dynamodb_partition_key_for(self, table_name: str) -> str:
        """The DynamoDB partition key, defaulting to the table's name as in Hudi."""
        return self.dynamodb_partition_key or table_name

    def hudi_properties(self, table_name: str | None = None) -> dict[str, str]:
        """Hudi's lock properties as strings (for Spark jobs that write through Hudi's own client)."""
        raw = self.model_dump(by_alias=True, exclude_none=True)
        if table_name is not None:
            if self.kind == "zookeeper":
                raw.setdefault(_ZK + "lock_key", table_name)
            if self.kind == "dynamodb":
                raw.setdefault(_DDB + "partition_key", table_name)
        return {k: str(v) for k, v in raw.items()}


def merge_locks(base: LockSettings, overrides: Mapping[str, Any]) -> LockSettings:
    """`base` with per-table `overrides` laid over key by key (None values inherit), validated again."""
    raw: dict[str, Any] = base.model_dump(by_alias=True, exclude_unset=True)
    raw.update({k: v for k, v in overrides.items() if v is not None})
    return LockSettings.model_validate(raw)
