"""Storage over pyarrow.fs for local folders and S3.

Every method takes a *location*: a local path, a `file:` URI, or an `s3://` / `s3a://` URI. Locations are
kept as the user gave them (normalised to `s3://` and plain local paths) so that paths written into Hudi
metadata look like the ones Hudi writes.

Local whole-file writes go through a temp file in the target's folder (`.tmp-*`, `TEMP_PREFIX`): written in full,
fsynced, then renamed or hard-linked into place. Any failure on the way (ENOSPC, a short write, fsync, the rename,
a KeyboardInterrupt) removes the temp file before the error leaves. Listings never show `.tmp-*` files (a killed
process can leave one: it is neither an instant nor a data file); the timeline's listing under the table lock
(`ActiveTimeline.load(sweep_temp_files=True)`) deletes those older than `STALE_TEMP_AGE_MS`.
Write errors are StorageErrors naming the target file and the OS's reason; a full device or an exhausted quota
(ENOSPC, EDQUOT) is a StorageFullError: retryable, since space is freed by other processes (cleaning, the
operator), so the daemon backs off and, if it persists, quarantines the table after
`service.retry.quarantine_after_failures` attempts.

Object-store requests are counted by kind where they are made (`tableservice.storage.requests`). On S3 each call
makes a known number of requests: `read_bytes` one GET and `write_bytes` one PUT (no HEAD first); `open_input_file`
with the `size` a listing gave one ranged GET per read (without it a HEAD first); `list` one LIST per page of 1,000
entries (on S3 through `s3_list`, our own ListObjectsV2 client, unless the options say `list_client="pyarrow"`);
`info` one HEAD (and a LIST when no object has that key: it may be a folder); `delete` one DELETE; `delete_dir` a
LIST per page and a batch-delete POST per 1,000 keys; `open_output_stream` one PUT for a file of up to
`MULTIPART_PART_SIZE`, else a multipart upload.
"""

from __future__ import annotations

import os
import posixpath
import re
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from tableservice.errors import AlreadyExistsError, FileMissingError, InvalidPathError, StorageError
from tableservice.storage.local_io import storage_error, unlink_quietly, write_temp
from tableservice.storage.locations import FileInfo, StorageOptions, is_temp_file, join, to_uri
from tableservice.storage.requests import RequestKind, RequestTally, count
from tableservice.storage.s3_io import CountedOutput, S3RangeFile, retries
from tableservice.storage.s3_list import S3Lister
from tableservice.storage.s3_sign import Credentials
from tableservice.storage.sizes import known_size

# A temp file older than this belongs to no running write (timeline files are written in milliseconds).
STALE_TEMP_AGE_MS = 3600 * 1000
_CONTROL = re.compile("[\x00-\x1f\x7f]")
LIST_PAGE = 1000


class Storage:
    """Reads, writes and lists files on local disk or S3; one instance serves any number of tables."""

    def __init__(self, options: StorageOptions | None = None) -> None:
        self.options = options if options is not None else StorageOptions.from_env()
        self._local = pafs.LocalFileSystem()
        self._s3: pafs.S3FileSystem | None = None
        self._boto: Any = None
        self._lister: S3Lister | None = None
        self._lister_guard = threading.Lock()

    # --- resolution --------------------------------------------------------------------------------

    def _resolve(self, location: str) -> tuple[pafs.FileSystem, str]:
        if _CONTROL.search(location):
            raise InvalidPathError(f"location {location!r} holds a control character", path=location)
        uri = to_uri(location)
        if uri.startswith("s3://"):
            return self._s3fs(), uri[len("s3://") :]
        if "://" in uri:
            raise StorageError(f"unsupported URI scheme in {location!r}", path=location)
        return self._local, os.path.abspath(uri)

    def _s3fs(self) -> pafs.S3FileSystem:
        if self._s3 is None:
            kwargs: dict[str, Any] = {}
            o = self.options
            if o.endpoint_url:
                scheme, _, rest = o.endpoint_url.partition("://")
                kwargs["endpoint_override"] = rest if rest else o.endpoint_url
                kwargs["scheme"] = scheme if rest else "https"
                kwargs["allow_bucket_creation"] = True
            # A small file goes up as one PutObject instead of a multipart upload's three requests.
            kwargs["allow_delayed_open"] = True
            if o.region:
                kwargs["region"] = o.region
            kwargs["connect_timeout"] = o.connect_timeout_s
            kwargs["request_timeout"] = o.request_timeout_s
            if o.access_key_id and o.secret_access_key:
                kwargs["access_key"] = o.access_key_id
                kwargs["secret_key"] = o.secret_access_key
                if o.session_token:
                    kwargs["session_token"] = o.session_token
            self._s3 = pafs.S3FileSystem(**kwargs)
        return self._s3

    def _boto_client(self) -> Any:
        if self._boto is None:
            import boto3

            o = self.options
            from botocore.config import Config

            self._boto = boto3.client(
                "s3",
                # The daemon's worker threads share one client.
                config=Config(
                    max_pool_connections=64, connect_timeout=o.connect_timeout_s, read_timeout=o.request_timeout_s
                ),
                endpoint_url=o.endpoint_url,
                region_name=o.region,
                aws_access_key_id=o.access_key_id,
                aws_secret_access_key=o.secret_access_key,
                aws_session_token=o.session_token,
            )
        return self._boto

    def _s3_lister(self) -> S3Lister:
        if self._lister is None:
            with self._lister_guard:  # one lister (one pool, one page cache) for every thread
                if self._lister is None:
                    o = self.options
                    creds = None
                    if o.access_key_id and o.secret_access_key:
                        creds = Credentials(o.access_key_id, o.secret_access_key, o.session_token or None)
                    timeouts = (o.connect_timeout_s, o.request_timeout_s)
                    self._lister = S3Lister(o.endpoint_url, o.region, creds, timeouts)
        return self._lister

    def is_local(self, location: str) -> bool:
        return not to_uri(location).startswith("s3://")

    # --- reads -------------------------------------------------------------------------------------

    def read_bytes(self, location: str) -> bytes:
        fs, path = self._resolve(location)
        if fs is not self._local:
            return self._get(location, path)
        try:
            with fs.open_input_stream(path) as f:
                return bytes(f.read())
        except FileNotFoundError as e:
            raise FileMissingError("file does not exist", path=location) from e
        except OSError as e:
            raise storage_error("read failed", location, e) from e

    def open_input_file(self, location: str, size: int | None = None) -> pa.NativeFile:
        """A random-access file (for Parquet footers and row groups). On S3, `size` (from a listing, or the enclosing
        `known_sizes` scope) spares the HEAD that finds it; every read is one ranged GET."""
        fs, path = self._resolve(location)
        if fs is not self._local:
            if size is None:
                size = known_size(location)
            if size is None:
                info = self.info(location)
                if info is None or info.is_dir:
                    raise FileMissingError("file does not exist", path=location)
                size = info.size
            return pa.PythonFile(S3RangeFile(self, location, path, size), mode="r")
        try:
            return fs.open_input_file(path)
        except FileNotFoundError as e:
            raise FileMissingError("file does not exist", path=location) from e
        except OSError as e:
            raise storage_error("open failed", location, e) from e

    def info(self, location: str) -> FileInfo | None:
        """Size and modification time of a file, or None when it does not exist."""
        fs, path = self._resolve(location)
        try:
            fi = fs.get_file_info(path)
        except OSError as e:
            raise storage_error("stat failed", location, e) from e
        finally:
            if fs is not self._local:
                count(RequestKind.HEAD)
        if fs is not self._local and fi.type != pafs.FileType.File:
            count(RequestKind.LIST)  # no object has that key: pyarrow lists it as a folder
        if fi.type == pafs.FileType.NotFound:
            return None
        return _file_info(location, fi)

    def exists(self, location: str) -> bool:
        return self.info(location) is not None

    def list(self, location: str, *, recursive: bool = False, temp_files: bool = False) -> list[FileInfo]:
        """Entries under a folder; an absent folder lists as empty. Temp files (`.tmp-*`) are left out unless
        `temp_files`."""
        fs, path = self._resolve(location)
        base = location.rstrip("/")
        if fs is not self._local and self.options.list_client != "pyarrow":
            bucket, _, key = path.partition("/")
            return [
                FileInfo(f"{base}/{e.rel}", e.size, e.mtime_ms, e.is_dir)
                for e in self._s3_lister().list(location, bucket, key, recursive)
                if temp_files or not is_temp_file(posixpath.basename(e.rel))
            ]
        selector = pafs.FileSelector(path, allow_not_found=True, recursive=recursive)
        try:
            infos = fs.get_file_info(selector)
        except OSError as e:
            if fs is not self._local:
                count(RequestKind.LIST)
            raise storage_error("listing failed", location, e) from e
        if fs is not self._local:
            count(RequestKind.LIST, max(1, -(-len(infos) // LIST_PAGE)))
        out = []
        for fi in infos:
            rel = fi.path[len(path.rstrip("/")) + 1 :]
            if not temp_files and is_temp_file(posixpath.basename(rel)):
                continue
            out.append(_file_info(f"{base}/{rel}", fi))
        return out

    # --- writes ------------------------------------------------------------------------------------

    def write_bytes(self, location: str, data: bytes) -> None:
        """Write a whole file, replacing what was there. Local writes land atomically (temp + fsync + rename); the
        temp file is removed whatever fails."""
        fs, path = self._resolve(location)
        if fs is not self._local:
            bucket, _, key = path.partition("/")
            self._call(RequestKind.PUT, location, "write", lambda c: c.put_object(Bucket=bucket, Key=key, Body=data))
            return
        tmp = write_temp(path, data, location)
        try:
            os.replace(tmp, path)
        except BaseException as e:
            unlink_quietly(tmp)
            if isinstance(e, OSError):
                raise storage_error("write failed", location, e) from e
            raise

    def create_if_absent(self, location: str, data: bytes) -> None:
        """Create a file with `data` only if nothing exists at `location`, atomically.

        Raises AlreadyExistsError when the file exists. Local: the content is written to a temp file (fsynced)
        and hard-linked into place, so no reader ever sees a partial file; the temp file is removed whatever
        fails. S3: a conditional PUT (`If-None-Match: *`).
        """
        fs, path = self._resolve(location)
        if fs is self._local:
            tmp = write_temp(path, data, location)
            try:
                os.link(tmp, path)
            except FileExistsError as e:
                raise AlreadyExistsError("file already exists", path=location) from e
            except OSError as e:
                raise storage_error("create failed", location, e) from e
            finally:
                unlink_quietly(tmp)
            return
        from botocore.exceptions import BotoCoreError

        bucket, _, key = path.partition("/")
        client = self._boto_client()
        try:
            reply = client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            count(RequestKind.PUT, 1 + retries(reply))
        except client.exceptions.ClientError as e:
            count(RequestKind.PUT, 1 + retries(e.response))
            code = e.response.get("Error", {}).get("Code", "")
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "412"):
                retried = retries(e.response) > 0
                if retried and self._holds(client, bucket, key, data):
                    # botocore retried after a lost response: the object that exists is our own first attempt
                    return
                raise AlreadyExistsError("file already exists", path=location) from e
            raise StorageError(f"conditional put failed: {code}", path=location) from e
        except BotoCoreError as e:  # the connection reset, timed out or refused once botocore's retries ran out
            count(RequestKind.PUT)
            raise StorageError(f"conditional put failed: {type(e).__name__}: {e}", path=location) from e

    @staticmethod
    def _holds(client: Any, bucket: str, key: str, data: bytes) -> bool:
        """Whether the object holds exactly `data` (a conditional put that was retried: did its first attempt land?).
        Another writer's object for the same timeline file would have to be byte for byte ours to pass."""
        count(RequestKind.GET)
        try:
            body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except Exception:  # any failure to read it back: not proven ours, the conflict stands
            return False
        return bool(body == data)

    def _call(
        self, kind: RequestKind, location: str, what: str, request: Any, scopes: tuple[RequestTally, ...] | None = None
    ) -> Any:
        """One boto3 request, counted with botocore's retries; errors become StorageErrors naming `location`
        (FileMissingError for a missing key)."""
        from botocore.exceptions import BotoCoreError, ClientError

        client = self._boto_client()
        try:
            reply = request(client)
        except ClientError as e:
            count(kind, 1 + retries(e.response), scopes)
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404", "NotFound"):
                raise FileMissingError("file does not exist", path=location) from e
            raise StorageError(f"{what} failed: {code or e}", path=location) from e
        except BotoCoreError as e:  # reset, timed out or refused once botocore's retries ran out
            count(kind, 1, scopes)
            raise StorageError(f"{what} failed: {type(e).__name__}: {e}", path=location) from e
        count(kind, 1 + retries(reply), scopes)
        return reply

    def _get(
        self,
        location: str,
        path: str,
        byte_range: str | None = None,
        scopes: tuple[RequestTally, ...] | None = None,
    ) -> bytes:
        """One GetObject (a whole object, or `byte_range`: `bytes=a-b`), body read in full."""
        from botocore.exceptions import BotoCoreError

        bucket, _, key = path.partition("/")
        extra = {"Range": byte_range} if byte_range else {}
        reply = self._call(
            RequestKind.GET, location, "read", lambda c: c.get_object(Bucket=bucket, Key=key, **extra), scopes
        )
        try:
            return bytes(reply["Body"].read())
        except (BotoCoreError, OSError) as e:  # the body cut short or the connection reset while reading it
            raise StorageError(f"read failed: {type(e).__name__}: {e}", path=location) from e

    def open_output_stream(self, location: str) -> pa.NativeFile:
        """A stream that creates or replaces the file (parent folders are created as needed)."""
        fs, path = self._resolve(location)
        try:
            if fs is self._local:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                return fs.open_output_stream(path)
            return pa.PythonFile(CountedOutput(fs.open_output_stream(path)), mode="w")
        except OSError as e:
            raise storage_error("open for write failed", location, e) from e

    def mkdirs(self, location: str) -> None:
        fs, path = self._resolve(location)
        try:
            fs.create_dir(path, recursive=True)
        except OSError as e:
            raise storage_error("mkdir failed", location, e) from e
        finally:
            if fs is not self._local:  # the bucket's HEAD, then a folder marker per level
                count(RequestKind.HEAD)
                count(RequestKind.PUT, len([p for p in path.split("/")[1:] if p]))

    def delete(self, location: str, *, missing_ok: bool = True) -> bool:
        """Delete one file. Returns False if it did not exist (or raises when `missing_ok` is False). On S3 one
        DeleteObject, which does not say whether the key existed: True unless `missing_ok` is False (then a HEAD
        asks first)."""
        fs, path = self._resolve(location)
        if fs is not self._local:
            if not missing_ok:
                found = self.info(location)
                if found is None or found.is_dir:
                    raise FileMissingError("file does not exist", path=location)
            bucket, _, key = path.partition("/")
            self._call(RequestKind.DELETE, location, "delete", lambda c: c.delete_object(Bucket=bucket, Key=key))
            return True
        try:
            fs.delete_file(path)
            return True
        except FileNotFoundError as e:
            if missing_ok:
                return False
            raise FileMissingError("file does not exist", path=location) from e
        except OSError as e:
            raise storage_error("delete failed", location, e) from e

    def delete_dir(self, location: str) -> None:
        fs, path = self._resolve(location)
        if fs is not self._local:
            self._delete_prefix(location, path)
            return
        try:
            fs.delete_dir(path)
        except FileNotFoundError:
            return
        except OSError as e:
            raise storage_error("delete dir failed", location, e) from e

    def rename(self, src: str, dst: str) -> None:
        fs, spath = self._resolve(src)
        _, dpath = self._resolve(dst)
        try:
            fs.move(spath, dpath)
        except FileNotFoundError as e:
            raise FileMissingError("file does not exist", path=src) from e
        except OSError as e:
            raise storage_error("rename failed", src, e) from e

    def _delete_prefix(self, location: str, path: str) -> None:
        """Every object under a folder on S3: a LIST per page, a batch delete (POST) per page."""
        bucket, _, key = path.partition("/")
        prefix = key.rstrip("/") + "/" if key else ""
        token: str | None = None
        while True:
            extra = {"ContinuationToken": token} if token else {}
            page = self._call(
                RequestKind.LIST,
                location,
                "listing",
                lambda c, extra=extra: c.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=LIST_PAGE, **extra),
            )
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]  # a folder marker too, if any
            if keys:
                self._call(
                    RequestKind.POST,
                    location,
                    "delete dir",
                    lambda c, keys=keys: c.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True}),
                )
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def touch(self, location: str) -> None:
        """Create or rewrite an empty file (heartbeats): its modification time becomes now."""
        self.write_bytes(location, b"")

    def walk_files(self, location: str) -> Iterator[FileInfo]:
        for fi in self.list(location, recursive=True):
            if not fi.is_dir:
                yield fi

    def make_temp_name(self, folder: str, stem: str) -> str:
        return join(folder, f".{stem}.{uuid.uuid4().hex}.tmp")


def _file_info(location: str, fi: pafs.FileInfo) -> FileInfo:
    mtime = fi.mtime_ns // 1_000_000 if fi.mtime_ns is not None else 0
    is_dir = fi.type == pafs.FileType.Directory
    return FileInfo(
        location=location, size=fi.size if fi.size is not None and not is_dir else 0, mtime_ms=mtime, is_dir=is_dir
    )
