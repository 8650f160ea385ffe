"""AWS Signature Version 4 for S3 GET requests without a body, and the credentials that sign them.

Written from AWS's description of SigV4 (the canonical request, the string to sign, the derived signing key): the
canonical request is the method, the URI-encoded path, the query string with every name and value URI-encoded
(only `A-Z a-z 0-9 - _ . ~` left as they are, `%XX` in upper case, a space as `%20`) and sorted by name, the signed
headers (lower-case names, sorted, `name:value` lines), their names joined by `;`, and the payload's SHA-256 (of
nothing, for a GET). The string to sign is `AWS4-HMAC-SHA256`, the request time, the scope
(`date/region/s3/aws4_request`) and the canonical request's SHA-256; the signing key is the secret HMAC'd with the
date, region, service and `aws4_request` in turn (one key per day and region, kept).

Credentials: the options' explicit keys when they carry them, else botocore's default chain (environment, profile,
web identity / IRSA, container and instance roles), whose refreshable credentials are read before every request
(`get_frozen_credentials`: botocore refreshes them ahead of their expiry).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_ALGORITHM = "AWS4-HMAC-SHA256"


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


class CredentialSource:
    """Explicit keys, or botocore's default chain (refreshed by botocore as they near expiry). A chain that found
    nothing is asked again after `RETRY_SECONDS` (an instance profile or IRSA not yet reachable at start)."""

    RETRY_SECONDS = 30.0

    def __init__(self, explicit: Credentials | None) -> None:
        self._explicit = explicit
        self._chain: Any = None
        self._missing_since: float | None = None
        self._guard = threading.Lock()

    def current(self) -> Credentials | None:
        """The credentials to sign the next request with; None when no source has any. botocore's own errors
        (a profile that does not exist, a credential process that fails) propagate: the caller types them."""
        if self._explicit is not None:
            return self._explicit
        chain = self._chain
        if chain is None:
            with self._guard:
                now = time.monotonic()
                if self._chain is None and (
                    self._missing_since is None or now - self._missing_since >= self.RETRY_SECONDS
                ):
                    import boto3

                    self._chain = boto3.Session().get_credentials()
                    self._missing_since = None if self._chain is not None else now
                chain = self._chain
        if chain is None:
            return None
        frozen = chain.get_frozen_credentials()
        return Credentials(frozen.access_key, frozen.secret_key, frozen.token or None)


def uri_encode(text: str) -> str:
    """SigV4's URI encoding of a query name or value: every byte but `A-Z a-z 0-9 - _ . ~` as `%XX`."""
    return quote(text, safe="-_.~")


def canonical_query(params: dict[str, str]) -> str:
    """The query string, encoded and sorted by name as SigV4 wants it (and sent exactly so)."""
    return "&".join(f"{uri_encode(k)}={uri_encode(v)}" for k, v in sorted(params.items()))


class Signer:
    """Signs S3 GET requests for one region; signing keys are kept per (secret, day)."""

    def __init__(self, region: str) -> None:
        self.region = region
        self._keys: dict[tuple[str, str], bytes] = {}

    def _signing_key(self, secret: str, day: str) -> bytes:
        key = self._keys.get((secret, day))
        if key is None:
            key = ("AWS4" + secret).encode()
            for part in (day, self.region, "s3", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            if len(self._keys) > 8:  # old days and rotated secrets
                self._keys.clear()
            self._keys[(secret, day)] = key
        return key

    def headers(
        self, creds: Credentials, host: str, path: str, query: str, now: datetime.datetime | None = None
    ) -> dict[str, str]:
        """The headers that sign `GET path?query` to `host` (`query` already canonical: `canonical_query`)."""
        now = now or datetime.datetime.now(datetime.UTC)
        stamp = now.strftime("%Y%m%dT%H%M%SZ")
        day = stamp[:8]
        signed = {"host": host, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": stamp}
        if creds.session_token:
            signed["x-amz-security-token"] = creds.session_token
        names = ";".join(signed)  # inserted in sorted order
        canonical = "\n".join(("GET", path, query, *(f"{k}:{v}" for k, v in signed.items()), "", names, EMPTY_SHA256))
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = f"{_ALGORITHM}\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(creds.secret_access_key, day), to_sign.encode(), hashlib.sha256)
        out = {
            "Host": host,
            "x-amz-content-sha256": EMPTY_SHA256,
            "x-amz-date": stamp,
            "Authorization": (
                f"{_ALGORITHM} Credential={creds.access_key_id}/{scope}, SignedHeaders={names}, "
                f"Signature={signature.hexdigest()}"
            ),
        }
        if creds.session_token:
            out["x-amz-security-token"] = creds.session_token
        return out
