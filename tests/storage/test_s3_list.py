"""The native S3 listing (`tableservice.storage.s3_list`) against pyarrow's, entry for entry, on a moto server that
checks every request's SigV4 signature (authentication on: an IAM user's keys, a role's session credentials)."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest

from tableservice.errors import StorageError
from tableservice.storage import Storage, StorageOptions
from tableservice.storage.requests import counting
from tests.support.servers import moto_server

_ALLOW_ALL = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
_TRUST_ALL = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}],
    }
)
BUCKET = "listing"
# Keys whose names a canonical request must encode: spaces, `+`, `=`, `&`, `%`, unicode, `~`
ODD_NAMES = ["a b.txt", "c+d=e.txt", "f&g%h.txt", "ünï cødé €.txt", "tilde~x.txt", "x;y,z@w:v.txt"]


@dataclass(frozen=True)
class AuthMoto:
    endpoint_url: str
    user_keys: tuple[str, str]
    session_keys: tuple[str, str, str]

    def options(self, list_client: str, endpoint_url: str | None = None, **keys: str) -> StorageOptions:
        return StorageOptions(
            endpoint_url=endpoint_url or self.endpoint_url,
            region="us-east-1",
            access_key_id=keys.get("access_key_id", self.user_keys[0]),
            secret_access_key=keys.get("secret_access_key", self.user_keys[1]),
            session_token=keys.get("session_token"),
            list_client=list_client,
        )


def _client(service: str, endpoint_url: str, key: str, secret: str) -> Any:
    make: Any = boto3.client  # any service by name
    return make(
        service, endpoint_url=endpoint_url, region_name="us-east-1", aws_access_key_id=key, aws_secret_access_key=secret
    )


@pytest.fixture(scope="module")
def auth_moto() -> Iterator[AuthMoto]:
    """moto checking signatures from its fourth request on: the first three make an IAM user allowed everything and
    its keys; the objects are then put with those keys, and a role assumed for session credentials."""
    with moto_server({"INITIAL_NO_AUTH_ACTION_COUNT": "3"}) as moto:
        url = moto.endpoint_url
        iam = _client("iam", url, "x", "x")
        iam.create_user(UserName="lister")
        iam.put_user_policy(UserName="lister", PolicyName="all", PolicyDocument=_ALLOW_ALL)
        key = iam.create_access_key(UserName="lister")["AccessKey"]
        user = (key["AccessKeyId"], key["SecretAccessKey"])
        role = _client("iam", url, *user).create_role(RoleName="r", AssumeRolePolicyDocument=_TRUST_ALL)
        _client("iam", url, *user).put_role_policy(RoleName="r", PolicyName="all", PolicyDocument=_ALLOW_ALL)
        temp = _client("sts", url, *user).assume_role(RoleArn=role["Role"]["Arn"], RoleSessionName="lister")
        s3 = _client("s3", url, *user)
        s3.create_bucket(Bucket=BUCKET)
        keys = [f"big/f{i:04d}.commit" for i in range(1010)]
        keys += [f"big/sub{i}/x.parquet" for i in range(3)]
        keys += ["nested/top.txt", "nested/a/b/c/deep.txt", "nested/a/b/side.txt", "nested/e/", "nested/e/f/g.txt"]
        keys += ["nested/.tmp-abc", "nested/a/.tmp-def"]
        keys += [f"odd/{n}" for n in ODD_NAMES] + [f"odd/{ODD_NAMES[0]}/inner.txt", "odd/ü/€ x+y"]
        keys += ["odd+dir=x/a b", "odd+dir=x/c/d"]
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda k: s3.put_object(Bucket=BUCKET, Key=k, Body=b"x" * (len(k) % 7)), keys))
        c = temp["Credentials"]
        yield AuthMoto(
            moto.endpoint_url,
            user,
            (c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"]),
        )


def _both(options: StorageOptions, location: str, recursive: bool, temp_files: bool = False) -> tuple[list, list]:  # type: ignore[type-arg]
    ours = Storage(options).list(location, recursive=recursive, temp_files=temp_files)
    theirs = Storage(replace(options, list_client="pyarrow")).list(location, recursive=recursive, temp_files=temp_files)
    return ours, theirs


@pytest.mark.parametrize("recursive", [False, True])
@pytest.mark.parametrize("folder", ["big", "nested", "odd", "odd+dir=x", "odd/a b.txt", "odd/ü", "missing", ""])
def test_the_native_listing_is_pyarrows(auth_moto: AuthMoto, folder: str, recursive: bool) -> None:
    """Names, sizes, modification times, folders and order as pyarrow lists them: past a page of 1,000 keys, nested
    folders (a folder marker among them), keys a canonical request must encode, a missing prefix, the bucket."""
    location = f"s3://{BUCKET}/{folder}" if folder else f"s3://{BUCKET}"
    ours, theirs = _both(auth_moto.options("native"), location, recursive)
    assert ours == theirs
    if folder not in ("missing",):
        assert ours  # something listed: the comparison compared entries
    if folder == "big":
        assert len([f for f in ours if not f.is_dir]) >= 1010 and all(f.mtime_ms > 0 for f in ours if not f.is_dir)


def test_a_folder_listed_again_is_read_again_only_when_its_answer_changed(
    auth_moto: AuthMoto, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Polling one folder: an unchanged one-page answer gives the entries read last time (its XML is not read
    again); a new object, an object written again (new time) and a deleted one are each seen on the next listing,
    as pyarrow sees them. A folder of more than one page is read every time."""
    from tableservice.storage import s3_list

    reads: list[int] = []
    real_page = s3_list._page

    def counted_page(*args: Any) -> str | None:
        reads.append(1)
        return real_page(*args)

    monkeypatch.setattr(s3_list, "_page", counted_page)
    options = auth_moto.options("native")
    storage = Storage(options)
    pyarrow_storage = Storage(replace(options, list_client="pyarrow"))
    s3 = _client("s3", auth_moto.endpoint_url, *auth_moto.user_keys)
    for folder, pages in (("nested", 1), ("big", 2)):
        location = f"s3://{BUCKET}/{folder}"
        first = storage.list(location)
        reads.clear()
        again = storage.list(location)
        assert again == first
        assert len(reads) == (0 if pages == 1 else pages)  # one page: from the kept entries; more: read again
        s3.put_object(Bucket=BUCKET, Key=f"{folder}/added.txt", Body=b"abc")
        s3.put_object(Bucket=BUCKET, Key=f"{folder}/zz-rewritten.txt", Body=b"1")
        reads.clear()
        changed = storage.list(location)
        assert len(reads) == pages  # a changed answer is read
        assert changed == pyarrow_storage.list(location)
        assert {f.name for f in changed} - {f.name for f in first} == {"added.txt", "zz-rewritten.txt"}
        before = next(f for f in changed if f.name == "zz-rewritten.txt")
        time.sleep(1.1)  # S3 times are to the second or millisecond: a later write shows a later time
        s3.put_object(Bucket=BUCKET, Key=f"{folder}/zz-rewritten.txt", Body=b"2")
        s3.delete_object(Bucket=BUCKET, Key=f"{folder}/added.txt")
        after = storage.list(location)
        assert after == pyarrow_storage.list(location)
        rewritten = next(f for f in after if f.name == "zz-rewritten.txt")
        assert rewritten.mtime_ms > before.mtime_ms and rewritten.size == before.size == 1
        assert "added.txt" not in {f.name for f in after}
        s3.delete_object(Bucket=BUCKET, Key=f"{folder}/zz-rewritten.txt")
        assert storage.list(location) == first


def test_keys_are_url_decoded_only_when_the_store_says_it_encoded_them() -> None:
    """A store that ignores `encoding-type=url` sends keys as they are: `+` and `%41` then stay in the name."""
    from tableservice.storage.s3_list import Entry, _page

    def answer(encoding: str) -> bytes:
        return (
            "<ListBucketResult><Name>b</Name><Prefix>t/</Prefix>" + encoding + "<IsTruncated>false</IsTruncated>"
            "<Contents><Key>t/a+b%41.txt</Key><LastModified>2024-05-01T12:00:00.000Z</LastModified>"
            "<Size>3</Size></Contents></ListBucketResult>"
        ).encode()

    encoded: list[Entry] = []
    _page(answer("<EncodingType>url</EncodingType>"), "t/", False, encoded, set())
    raw: list[Entry] = []
    _page(answer(""), "t/", False, raw, set())
    assert [e.rel for e in encoded] == ["a bA.txt"]
    assert [e.rel for e in raw] == ["a+b%41.txt"]
    assert encoded[0].mtime_ms == raw[0].mtime_ms == 1714564800000


def test_temp_files_listed_on_request_as_pyarrow_lists_them(auth_moto: AuthMoto) -> None:
    ours, theirs = _both(auth_moto.options("native"), f"s3://{BUCKET}/nested", True, temp_files=True)
    assert ours == theirs
    assert {f.name for f in ours} >= {".tmp-abc", ".tmp-def"}


def test_a_missing_bucket_lists_as_empty_as_with_pyarrow(auth_moto: AuthMoto) -> None:
    ours, theirs = _both(auth_moto.options("native"), "s3://no-such-bucket/x", False)
    assert ours == theirs == []


def test_session_credentials_sign_with_their_token(auth_moto: AuthMoto) -> None:
    key, secret, token = auth_moto.session_keys
    options = auth_moto.options("native", access_key_id=key, secret_access_key=secret, session_token=token)
    ours, theirs = _both(options, f"s3://{BUCKET}/odd", True)
    assert ours == theirs and ours
    without = replace(options, session_token=None)
    with pytest.raises(StorageError) as missing:
        Storage(without).list(f"s3://{BUCKET}/odd")
    assert missing.value.path == f"s3://{BUCKET}/odd"


def test_a_wrong_secret_is_the_pyarrow_paths_error_naming_the_location(auth_moto: AuthMoto) -> None:
    """The same error class as the pyarrow path raises (StorageError: S3's 403 is not told apart there), naming the
    location and S3's code; one request counted, as the server got one."""
    options = auth_moto.options("native", secret_access_key="wrong-secret")
    location = f"s3://{BUCKET}/nested"
    with counting() as tally, pytest.raises(StorageError) as ours:
        Storage(options).list(location)
    with pytest.raises(StorageError) as theirs:
        Storage(replace(options, list_client="pyarrow")).list(location)
    assert type(ours.value) is type(theirs.value)
    assert ours.value.path == theirs.value.path == location
    assert "SignatureDoesNotMatch" in ours.value.problem and "403" in ours.value.problem
    assert ours.value.retryable == theirs.value.retryable
    assert tally.counts() == {"LIST": 1}


class _KeepAliveBreaker(ThreadingHTTPServer):
    """Forwards GETs to moto and answers with HTTP/1.1 keep-alive, but breaks it: `close` closes each connection
    right after its first answer; `drop` reads the second request on a connection and closes it unanswered."""

    daemon_threads = True

    def __init__(self, upstream: str, mode: str) -> None:
        super().__init__(("127.0.0.1", 0), _BreakerHandler)
        self.upstream = upstream.split("://", 1)[1]
        self.mode = mode
        self.answered: list[str] = []
        self.dropped = 0

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _BreakerHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _KeepAliveBreaker

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_GET(self) -> None:
        if getattr(self, "_served", False):  # only in `drop` mode does a second request arrive here
            self.server.dropped += 1
            self.close_connection = True
            return
        conn = http.client.HTTPConnection(self.server.upstream, timeout=30)
        conn.request("GET", self.path, headers=dict(self.headers.items()))
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        self.server.answered.append(self.path)  # before the answer leaves: the client may look at once
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.getheader("Content-Type", "application/xml"))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self._served = True
        if self.server.mode == "close":
            self.close_connection = True


@pytest.mark.parametrize("mode", ["close", "drop"])
def test_a_kept_alive_connection_the_server_closed_is_reopened(auth_moto: AuthMoto, mode: str) -> None:
    """Every listing succeeds and equals pyarrow's; each request counted once, as the server answered it (a request
    sent on a connection found closed is sent again on a new one, not counted)."""
    breaker = _KeepAliveBreaker(auth_moto.endpoint_url, mode)
    thread = threading.Thread(target=breaker.serve_forever, daemon=True)
    thread.start()
    try:
        storage = Storage(auth_moto.options("native", endpoint_url=breaker.endpoint_url))
        expected = Storage(auth_moto.options("pyarrow")).list(f"s3://{BUCKET}/big")
        with counting() as tally:
            listings = [storage.list(f"s3://{BUCKET}/big") for _ in range(3)]
        assert listings == [expected] * 3
        assert tally.counts() == {"LIST": len(breaker.answered)} and len(breaker.answered) == 6  # two pages each
        if mode == "drop":
            assert breaker.dropped >= 1
    finally:
        breaker.shutdown()
        breaker.server_close()


def test_the_page_cache_keeps_small_answers_within_its_bytes_least_recently_used_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tableservice.storage import s3_list

    monkeypatch.setattr(s3_list, "PAGE_CACHE_BYTES", 2 * 250)  # each answer counts twice: room for 250 bytes
    monkeypatch.setattr(s3_list, "PAGE_CACHE_MAX_BODY", 150)
    cache = s3_list._PageCache()
    entry = s3_list.Entry("x", 1, 2, False)
    cache.keep(("b", "q1"), b"1" * 100, (entry,))
    cache.keep(("b", "q2"), b"2" * 100, ())
    cache.keep(("b", "big"), b"3" * 151, (entry,))  # over the largest answer kept
    assert cache.get(("b", "big"), b"3" * 151) is None
    assert cache.get(("b", "q1"), b"1" * 100) == (entry,)  # q1 now the most recently used
    assert cache.get(("b", "q1"), b"1" * 99) is None  # another answer: read it again
    cache.keep(("b", "q3"), b"4" * 100, (entry, entry))  # 300 bytes > 250: the least recent (q2) goes
    assert cache.get(("b", "q2"), b"2" * 100) is None
    assert cache.get(("b", "q1"), b"1" * 100) == (entry,)
    assert cache.get(("b", "q3"), b"4" * 100) == (entry, entry)
