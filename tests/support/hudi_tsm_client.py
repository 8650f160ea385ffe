"""The URLs Hudi's table-service-manager client (`org.apache.hudi.client.HoodieTableServiceManagerClient`, Hudi
0.13+) calls, built as it builds them, and a plain GET as it sends them.

What Hudi does, restated: the parameters go into a `java.util.HashMap` (`basepath` first, then `action`,
`db_name`, `table_name`, `instant`, `username`, `queue`, `resource`, `parallelism`, `extra_params`,
`execution_engine`); Apache HttpClient's `URIBuilder(URI.create(uris)).setPath(path)` keeps the query string of
`hoodie.table.service.manager.uris`, replaces its path, and appends the map's entries in the map's iteration
order, form-encoded (`URLEncodedUtils`: letters, digits and `-_.*` kept, space as `+`, the rest `%XX` of UTF-8;
a null value gives the bare name). Then `Request.Get(url)` with no header of its own; only a 2xx status passes.
The map's order is reproduced from Java's `String.hashCode` and `HashMap`'s bucket spread (16 buckets for 11
entries).
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

BASE_URL = "/v1/hoodie/service"
PATHS = {"compaction": f"{BASE_URL}/compact", "clustering": f"{BASE_URL}/cluster", "clean": f"{BASE_URL}/clean"}

# HoodieTableServiceManagerConfig's keys and defaults (deploy.extra.params has no default: null).
DEFAULTS: dict[str, str | None] = {
    "hoodie.table.service.manager.uris": "http://localhost:9091",
    "hoodie.table.service.manager.deploy.username": "default",
    "hoodie.table.service.manager.deploy.queue": "default",
    "hoodie.table.service.manager.deploy.resources": "spark:4g,4g",
    "hoodie.table.service.manager.deploy.parallelism": "100",
    "hoodie.table.service.manager.deploy.extra.params": None,
    "hoodie.table.service.manager.execution.engine": "spark",
}
_FORM_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.*")


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode` (UTF-16 code units), as a signed 32-bit int."""
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def hashmap_order(keys: list[str]) -> list[str]:
    """The iteration order of a `java.util.HashMap` that got `keys` put in this order (no resize: at most 12)."""
    assert len(keys) <= 12, "more keys would resize the table"
    buckets: dict[int, list[str]] = {}
    for key in keys:
        h = java_string_hash(key) & 0xFFFFFFFF
        buckets.setdefault((h ^ (h >> 16)) & 15, []).append(key)
    return [key for index in sorted(buckets) for key in buckets[index]]


def form_encode(text: str) -> str:
    out = []
    for char in text:
        if char in _FORM_SAFE:
            out.append(char)
        elif char == " ":
            out.append("+")
        else:
            out.extend(f"%{b:02X}" for b in char.encode("utf-8"))
    return "".join(out)


def build_url(uris: str, path: str, params: list[tuple[str, str | None]]) -> str:
    """`URIBuilder(URI.create(uris)).setPath(path)`, then `addParameter` for each of `params`, `toString()`."""
    parts = urllib.parse.urlsplit(uris)
    pairs: list[tuple[str, str | None]] = list(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    pairs += params
    query = "&".join(form_encode(k) if v is None else f"{form_encode(k)}={form_encode(v)}" for k, v in pairs)
    return f"{parts.scheme}://{parts.netloc}{path}" + (f"?{query}" if pairs else "")


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict[str, str]


def get(url: str, headers: dict[str, str] | None = None, timeout: float = 30.0) -> Reply:
    """A GET as `Request.Get(url).execute()` sends it (`headers` only for tests of other clients)."""
    request = urllib.request.Request(url, headers=headers or {}, method="GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Reply(response.status, response.read(), {k.lower(): v for k, v in response.headers.items()})
    except urllib.error.HTTPError as e:
        return Reply(e.code, e.read(), {k.lower(): v for k, v in e.headers.items()})


@dataclass
class HudiTsmClient:
    """One writer's client: its table (`basepath`, `hoodie.database.name`, `hoodie.table.name`) and its
    `hoodie.table.service.manager.*` settings."""

    base_path: str
    table_name: str
    db_name: str | None = None
    config: dict[str, str] = field(default_factory=dict)

    def setting(self, key: str) -> str | None:
        return self.config.get(key, DEFAULTS.get(key))

    def url(self, service: str, action: str, instants: list[str]) -> str:
        """The URL for `action` on `service` (Hudi's `getDefaultParams`; REGISTER and CANCEL take the same shape)."""
        values: dict[str, str | None] = {
            "basepath": self.base_path,
            "action": action,
            "db_name": self.db_name,
            "table_name": self.table_name,
            "instant": ",".join(instants),
            "username": self.setting("hoodie.table.service.manager.deploy.username"),
            "queue": self.setting("hoodie.table.service.manager.deploy.queue"),
            "resource": self.setting("hoodie.table.service.manager.deploy.resources"),
            "parallelism": self.setting("hoodie.table.service.manager.deploy.parallelism"),
            "extra_params": self.setting("hoodie.table.service.manager.deploy.extra.params"),
            "execution_engine": self.setting("hoodie.table.service.manager.execution.engine"),
        }
        ordered = hashmap_order(list(values))
        uris = self.setting("hoodie.table.service.manager.uris")
        assert uris is not None
        return build_url(uris, PATHS[service], [(k, values[k]) for k in ordered])

    def call(self, service: str, action: str, instants: list[str]) -> Reply:
        return get(self.url(service, action, instants))
