"""The values the storage boundary speaks in: locations (local paths and `s3://` URIs, with `s3a://`/`s3n://` read
as `s3://`), the entries a listing gives, and the settings of an object store."""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field

from tableservice.storage.local_io import TEMP_PREFIX

_S3_SCHEMES = ("s3://", "s3a://", "s3n://")


def is_temp_file(name: str) -> bool:
    """Whether a file name is one of our temp files (`.tmp-*`)."""
    return name.startswith(TEMP_PREFIX)


@dataclass(frozen=True)
class StorageOptions:
    """Settings for object stores; unset values fall back to the usual AWS sources (env, profile, IMDS)."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    # A connection that does not open within `connect_timeout_s`, or a request whose reply stalls for
    # `request_timeout_s`, fails (retried by the client, then a retryable StorageError) instead of holding a worker.
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 30.0
    # S3 listings: "native" (`s3_list`: our ListObjectsV2 client, a fraction of pyarrow's CPU per LIST) or "pyarrow"
    list_client: str = "native"

    def shareable(self) -> dict[str, str | float]:
        """The settings that may travel with work shipped to other processes (Spark tasks): never credentials;
        those processes take them from their own environment (the usual AWS sources), as Spark's S3A does."""
        out: dict[str, str | float] = {
            k: v for k, v in (("endpoint_url", self.endpoint_url), ("region", self.region)) if v
        }
        default = StorageOptions()
        for key in ("connect_timeout_s", "request_timeout_s", "list_client"):
            if getattr(self, key) != getattr(default, key):
                out[key] = getattr(self, key)
        return out

    @classmethod
    def from_env(cls) -> StorageOptions:
        """Options from `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` and `AWS_REGION`; credentials stay with AWS."""
        return cls(
            endpoint_url=os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"),
            region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
        )


@dataclass(frozen=True)
class FileInfo:
    """One entry of a listing."""

    location: str
    size: int
    mtime_ms: int
    is_dir: bool

    @property
    def name(self) -> str:
        return posixpath.basename(self.location.rstrip("/"))


def to_uri(location: str) -> str:
    """Normalise a location: `s3a://`/`s3n://` become `s3://`, `file:` URIs become plain paths."""
    for scheme in _S3_SCHEMES:
        if location.startswith(scheme):
            return "s3://" + location[len(scheme) :]
    if location.startswith("file://"):
        return location[len("file://") :] or "/"
    if location.startswith("file:"):
        return location[len("file:") :]
    return location


def join(location: str, *parts: str) -> str:
    """Join path parts onto a location with `/`, ignoring empty parts."""
    out = location.rstrip("/") if location not in ("/", "") else location
    for part in parts:
        if not part:
            continue
        out = out + part if out.endswith("/") else f"{out}/{part}"
    return out


def parent(location: str) -> str:
    """The folder holding `location`."""
    stripped = location.rstrip("/")
    head, _, _ = stripped.rpartition("/")
    if head.endswith(":/") or head.endswith(":"):
        return head + "/"
    return head or "/"
