"""The daemon's configuration model: one YAML file, validated by these pydantic models.

Top level: `service`, `spark`, `storage`, `locks`, `defaults`, `tables`, `discovery`. Every mapping rejects
unknown keys. `config.example.yaml` at the top of the repository documents every key and default.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Collection, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator
from pydantic import model_validator as _model_validator

from tableservice.config.cost import CostSettings
from tableservice.config.discovery import discover_tables, glob_regex
from tableservice.config.locks import LockSettings, merge_locks
from tableservice.config.policy import HudiValue, PolicySet, merge_policy
from tableservice.config.schema import ConfigIssue, ConfigIssues, MirrorOf, issue, issues_from_error
from tableservice.config.slo import BackoffSettings, GroupSettings, check_group_members, unknown_group_tables
from tableservice.storage import Storage, StorageOptions, to_uri

# Upper bounds of the daemon's own durations (seconds): beyond them a value is a unit mistake.
DAY_SECONDS = 86_400
WEEK_SECONDS = 7 * DAY_SECONDS


class _Section(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")


# --- service -----------------------------------------------------------------------------------------------------


class RetrySettings(_Section):
    """Back-off after a failed action, and quarantine of a table that keeps failing."""

    initial_backoff_seconds: float = Field(default=30.0, gt=0, le=DAY_SECONDS, allow_inf_nan=False)
    max_backoff_seconds: float = Field(default=1800.0, gt=0, le=DAY_SECONDS, allow_inf_nan=False)
    quarantine_after_failures: int = Field(default=5, ge=1, le=1000)
    quarantine_seconds: float = Field(default=3600.0, gt=0, le=WEEK_SECONDS, allow_inf_nan=False)

    @_model_validator(mode="after")
    def _ordered(self) -> RetrySettings:
        if self.max_backoff_seconds < self.initial_backoff_seconds:
            raise issue(
                "max_backoff_seconds",
                f"must be at least initial_backoff_seconds ({self.initial_backoff_seconds:g})",
                self.max_backoff_seconds,
            )
        return self


class HttpSettings(_Section):
    """The HTTP endpoint for /metrics (Prometheus), health checks and /status."""

    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=9464, ge=0, le=65535)
    max_connections: int = Field(default=64, ge=1, le=4096)
    """Connections open at once; one more closes the idlest open connection (probes are never kept waiting)."""
    status_token_file: str | None = Field(default=None, min_length=1)
    """A file holding a bearer token that /status (every route but /healthz, /readyz, /metrics) requires."""


class LogSettings(_Section):
    """The daemon's log on stderr: one event a line (JSON objects with `format: json`), the driver JVM's output
    (log4j2 events, Spark's and the Python workers' prints) re-emitted as events of the loggers `jvm.*`."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    format: Literal["text", "json"] = "text"
    spark_level: Literal["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"] = "WARN"
    """The driver JVM's log4j2 root level (raised to `level` when that is more severe)."""

    @field_validator("level", "format", "spark_level", mode="before")
    @classmethod
    def _case(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str):
            return value
        if info.field_name == "format":
            return value.strip().lower()
        upper = value.strip().upper()
        return "WARN" if info.field_name == "spark_level" and upper == "WARNING" else upper


class HistorySettings(_Section):
    """The history of the actions the daemon ran (served at /history and by `tableservice history`): an SQLite file
    beside the daemon's state, pruned on every insert to at most `max_rows` rows and `max_age_days` days."""

    enabled: bool = True
    path: str | None = Field(default=None, min_length=1)
    """The SQLite file; relative to the configuration file's folder. Default: `$XDG_STATE_HOME/tableservice/
    history.sqlite` (`~/.local/state/tableservice/history.sqlite` without XDG_STATE_HOME)."""
    max_rows: int = Field(default=100_000, ge=1, le=100_000_000)
    max_age_days: float = Field(default=90.0, gt=0, le=36_500, allow_inf_nan=False)

    @field_validator("path")
    @classmethod
    def _path(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        value = os.path.expanduser(value.strip())
        if "://" in value:
            raise ValueError("the history is a local file: expected a path, not a URI")
        base = (info.context or {}).get("base_dir") if info.context else None
        if not os.path.isabs(value):
            value = os.path.join(base if isinstance(base, str) else os.getcwd(), value)
        return os.path.normpath(value)


class TableServiceManagerSettings(_Section):
    """The table-service-manager endpoint Hudi writers call (`hoodie.table.service.manager.*`): REGISTER a table,
    REQUEST the execution of a plan they scheduled, CANCEL a request (`service/tsm.py`). Off by default; when on,
    it needs a token (a file, e.g. a mounted Kubernetes Secret)."""

    enabled: bool = False
    token_file: str | None = Field(default=None, min_length=1)
    """A file holding the token every call must carry (`Authorization: Bearer <token>` or, as Hudi's client can
    send no header, the query parameter `token`, set in the writer's `hoodie.table.service.manager.uris`)."""
    register_on_request: bool = False
    """A REQUEST for a table the daemon does not serve registers it first (with the request's owner, queue and
    resources) instead of answering 404."""

    @_model_validator(mode="after")
    def _token_when_enabled(self) -> TableServiceManagerSettings:
        if self.enabled and self.token_file is None:
            raise issue("token_file", "the endpoint needs a token file when it is enabled")
        return self


class ServiceSettings(_Section):
    poll_interval_seconds: float = Field(default=30.0, gt=0, le=DAY_SECONDS, allow_inf_nan=False)
    poll_jitter: float = Field(default=0.1, ge=0, lt=1, allow_inf_nan=False)
    max_concurrent_actions: int = Field(default=2, ge=1, le=256)
    shutdown_grace_seconds: float = Field(default=120.0, ge=0, le=DAY_SECONDS, allow_inf_nan=False)
    retry: RetrySettings = RetrySettings()
    http: HttpSettings = HttpSettings()
    log: LogSettings = LogSettings()
    history: HistorySettings = HistorySettings()
    cost: CostSettings = CostSettings()
    table_service_manager: TableServiceManagerSettings = TableServiceManagerSettings()
    groups: dict[str, GroupSettings] = {}
    """Per-group quotas: name -> {max_concurrent_actions, tables}; a table is in at most one group."""
    backoff: BackoffSettings = BackoffSettings()
    wait_budget_seconds: float = Field(default=3600.0, gt=0, le=7 * DAY_SECONDS, allow_inf_nan=False)
    """Every table's implicit deadline: due work should start within this long of when it began to wait (its SLO
    targets may ask for sooner); a waiting table moves up as it waits, so none starves."""

    @field_validator("groups")
    @classmethod
    def _groups(cls, value: dict[str, GroupSettings]) -> dict[str, GroupSettings]:
        check_group_members(value)
        return value


# --- spark -------------------------------------------------------------------------------------------------------

_LOCAL_MASTER = re.compile(r"local(\[(\*|\d+)(,\s*\d+)?\])?")
_OWN_KEYS = {"spark.master": "master", "spark.remote": "remote", "spark.app.name": "app_name"}


class SparkSettings(_Section):
    """Where Spark jobs run: a classic `master` or a Spark Connect `remote`, never both."""

    master: str | None = None
    remote: str | None = None
    app_name: str = Field(default="tableservice", min_length=1)
    conf: dict[str, str] = {}
    local_jvm_nice: int = Field(default=10, ge=0, le=19)

    @field_validator("master")
    @classmethod
    def _master(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if value.startswith("sc://"):
            raise ValueError("a Spark Connect URL (sc://...) goes in spark.remote")
        if not (_LOCAL_MASTER.fullmatch(value) or value == "yarn" or "://" in value):
            raise ValueError("expected local, local[N], local[*], yarn or a URL such as spark://host:7077")
        return value

    @field_validator("remote")
    @classmethod
    def _remote(cls, value: str | None) -> str | None:
        if value is not None and not value.strip().startswith("sc://"):
            raise ValueError("a Spark Connect URL starts with sc://")
        return None if value is None else value.strip()

    @field_validator("conf", mode="before")
    @classmethod
    def _conf(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        problems: list[ConfigIssue] = []
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if key in _OWN_KEYS:
                problems.append(ConfigIssue((key,), f"set spark.{_OWN_KEYS[key]} instead", item))
            elif not isinstance(key, str) or not key.startswith("spark."):
                problems.append(ConfigIssue((key,), "Spark configuration keys start with 'spark.'", item))
            elif isinstance(item, bool):
                out[key] = "true" if item else "false"
            elif isinstance(item, int | float | str):
                out[key] = str(item)
            else:
                problems.append(ConfigIssue((key,), "expected a string, number or boolean", item))
        if problems:
            raise ConfigIssues(problems)
        return out

    @_model_validator(mode="before")
    @classmethod
    def _one_of(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        master, remote = data.get("master"), data.get("remote")
        if master is not None and remote is not None:
            raise issue("remote", "spark.master and spark.remote are mutually exclusive; set only one of them", remote)
        if master is None and remote is None:
            return {**data, "master": "local[*]"}
        return data


# --- storage -----------------------------------------------------------------------------------------------------


class StorageSettings(_Section):
    """Object-store settings; credentials come only from the usual AWS sources, never from this file."""

    endpoint_url: str | None = Field(default=None, min_length=1)
    region: str | None = Field(default=None, min_length=1)
    connect_timeout_seconds: float = Field(default=5.0, gt=0, le=300)
    request_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    # S3 listings: the daemon's own ListObjectsV2 client, or pyarrow's (the fallback for a store it does not suit)
    list_client: Literal["native", "pyarrow"] = "native"

    def options(self, env: Mapping[str, str] | None = None) -> StorageOptions:
        """Options for `tableservice.storage.Storage`: these values, else AWS_ENDPOINT_URL(_S3) / AWS_REGION."""
        env = os.environ if env is None else env
        return StorageOptions(
            endpoint_url=self.endpoint_url or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
            region=self.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
            connect_timeout_s=self.connect_timeout_seconds,
            request_timeout_s=self.request_timeout_seconds,
            list_client=self.list_client,
        )


# --- tables and discovery ----------------------------------------------------------------------------------------


def normalise_location(value: str, info: ValidationInfo) -> str:
    """`s3a://` -> `s3://`, no trailing `/`; relative local paths resolve against the config file's folder."""
    loc = to_uri(value.strip())
    if loc.startswith("s3://"):
        bucket_and_key = loc[len("s3://") :].strip("/")
        if not bucket_and_key:
            raise ValueError("an S3 location needs a bucket: s3://bucket/prefix")
        return "s3://" + bucket_and_key
    if "://" in loc:
        raise ValueError("expected a local path or an s3:// URI")
    base = (info.context or {}).get("base_dir") if info.context else None
    if not os.path.isabs(loc):
        loc = os.path.join(base if isinstance(base, str) else os.getcwd(), loc)
    return os.path.normpath(loc)


class TableEntry(_Section):
    """One table: its location, an optional name, and overrides of `defaults` and `locks` for it."""

    uri: str = Field(min_length=1)
    name: str | None = Field(default=None, min_length=1)
    policy: Annotated[dict[str, Any], MirrorOf(PolicySet)] = {}
    locks: Annotated[dict[str, Any], MirrorOf(LockSettings)] = {}
    # A paused table is polled (status, pending metrics) but runs no action; `tableservice pause|resume` set these.
    paused: bool = False
    paused_reason: str | None = Field(default=None, max_length=500)

    @field_validator("uri")
    @classmethod
    def _uri(cls, value: str, info: ValidationInfo) -> str:
        return normalise_location(value, info)

    @field_validator("policy")
    @classmethod
    def _policy_shape(cls, value: dict[str, Any]) -> dict[str, Any]:
        for service, section in value.items():
            if section is not None and not isinstance(section, Mapping):
                raise issue(service, "expected a mapping of keys to values", section)
        return {k: dict(v) for k, v in value.items() if v is not None}


class DiscoveryRoot(_Section):
    """A folder searched for tables: folders holding `.hoodie/hoodie.properties` under `root`."""

    root: str = Field(min_length=1)
    max_depth: int = Field(default=3, ge=0, le=32)
    include: list[str] = []
    exclude: list[str] = []

    @field_validator("root")
    @classmethod
    def _root(cls, value: str, info: ValidationInfo) -> str:
        return normalise_location(value, info)

    @field_validator("include", "exclude")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        problems = []
        for i, pattern in enumerate(value):
            try:
                glob_regex(pattern)
            except re.error as e:
                problems.append(ConfigIssue((i,), f"not a valid glob pattern: {e}", pattern))
        if problems:
            raise ConfigIssues(problems)
        return value


# --- the whole file ----------------------------------------------------------------------------------------------


class DaemonConfig(_Section):
    """The daemon's whole configuration. Equal configurations compare equal; see `config_fingerprint`."""

    service: ServiceSettings = ServiceSettings()
    spark: SparkSettings = SparkSettings()
    storage: StorageSettings = StorageSettings()
    locks: LockSettings = LockSettings()
    defaults: PolicySet = PolicySet()
    tables: list[TableEntry] = []
    discovery: list[DiscoveryRoot] = []

    _policies: dict[str, PolicySet] = PrivateAttr(default_factory=dict)
    _locks: dict[str, LockSettings] = PrivateAttr(default_factory=dict)

    @_model_validator(mode="after")
    def _tables(self) -> DaemonConfig:
        problems: list[ConfigIssue] = []
        seen_uri: dict[str, int] = {}
        seen_name: dict[str, int] = {}
        for i, table in enumerate(self.tables):
            if table.uri in seen_uri:
                problems.append(
                    ConfigIssue(("tables", i, "uri"), f"also listed as tables[{seen_uri[table.uri]}]", table.uri)
                )
            seen_uri.setdefault(table.uri, i)
            if table.name is not None:
                if table.name in seen_name:
                    problems.append(
                        ConfigIssue(("tables", i, "name"), f"also used by tables[{seen_name[table.name]}]", table.name)
                    )
                seen_name.setdefault(table.name, i)
            try:
                self._policies[table.uri] = merge_policy(self.defaults, table.policy)
            except ValidationError as e:
                problems.extend(p.under(("tables", i, "policy")) for p in issues_from_error(e, PolicySet))
            try:
                self._locks[table.uri] = merge_locks(self.locks, table.locks) if table.locks else self.locks
            except ValidationError as e:
                problems.extend(p.under(("tables", i, "locks")) for p in issues_from_error(e, LockSettings))
        problems.extend(unknown_group_tables(self.service.groups, seen_name))
        if problems:
            raise ConfigIssues(problems)
        return self

    # --- per-table views -------------------------------------------------------------------------------

    def table(self, uri: str) -> TableEntry | None:
        """The entry listed for `uri` (any spelling: s3a://, trailing /), or None."""
        wanted = _identity(uri)
        return next((t for t in self.tables if t.uri == wanted), None)

    def resolve_tables(
        self, storage: Storage, *, known: Collection[str] = (), properties: dict[str, bytes] | None = None
    ) -> list[TableEntry]:
        """The listed tables, then those found under `discovery` roots and not listed (they get `defaults`
        and `locks` as they are). Lists each root once per call; storage errors propagate. `known` and
        `properties` go to `discover_tables` (tables served now; the properties files read)."""
        entries = list(self.tables)
        listed = {t.uri for t in entries}
        for root in self.discovery:
            found = discover_tables(
                storage, root.root, root.max_depth, root.include, root.exclude, known=known, properties=properties
            )
            for uri in found:
                if uri not in listed:
                    listed.add(uri)
                    entries.append(TableEntry.model_validate({"uri": uri}))
        return entries

    def effective_policy(self, table: TableEntry | str) -> PolicySet:
        """`defaults` merged with the table's overrides (a table not listed gets `defaults`)."""
        uri = table.uri if isinstance(table, TableEntry) else _identity(table)
        if isinstance(table, TableEntry) and table.uri not in self._policies and table.policy:
            return merge_policy(self.defaults, table.policy)
        return self._policies.get(uri, self.defaults)

    def effective_locks(self, table: TableEntry | str) -> LockSettings:
        """`locks` merged with the table's lock overrides (a table not listed gets `locks`)."""
        uri = table.uri if isinstance(table, TableEntry) else _identity(table)
        if isinstance(table, TableEntry) and table.uri not in self._locks and table.locks:
            return merge_locks(self.locks, table.locks)
        return self._locks.get(uri, self.locks)

    def table_fingerprint(self, table: TableEntry | str) -> str:
        """Digest of everything that decides how one table is served (name, effective policy and locks)."""
        entry = (
            table if isinstance(table, TableEntry) else self.table(table) or TableEntry.model_validate({"uri": table})
        )
        doc = {
            "uri": entry.uri,
            "name": entry.name,
            "policy": self.effective_policy(entry).model_dump(mode="json", by_alias=True),
            "locks": self.effective_locks(entry).model_dump(mode="json", by_alias=True),
        }
        return _digest(doc)

    def config_fingerprint(self) -> str:
        """Digest of the whole validated configuration; equal digests mean nothing changed on reload."""
        return _digest(self.model_dump(mode="json", by_alias=True))


def _identity(uri: str) -> str:
    loc = to_uri(uri.strip())
    if loc.startswith("s3://"):
        return "s3://" + loc[len("s3://") :].strip("/")
    return os.path.normpath(os.path.abspath(loc)) if "://" not in loc else loc


def _digest(doc: Any) -> str:
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


__all__ = [
    "BackoffSettings",
    "DaemonConfig",
    "DiscoveryRoot",
    "GroupSettings",
    "HistorySettings",
    "HttpSettings",
    "HudiValue",
    "LogSettings",
    "RetrySettings",
    "ServiceSettings",
    "SparkSettings",
    "StorageSettings",
    "TableEntry",
    "TableServiceManagerSettings",
]
