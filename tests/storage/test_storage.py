from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest

from tableservice.errors import AlreadyExistsError, FileMissingError, InvalidPathError, StorageError
from tableservice.storage import Storage, join, parent, to_uri
from tests.support.faults.s3_proxy import FaultPlan, FaultProxy
from tests.support.servers import MotoServer


def _roots(tmp_path: Path, s3_bucket: tuple[Storage, str] | None) -> list[tuple[Storage, str]]:
    out = [(Storage(), str(tmp_path))]
    if s3_bucket is not None:
        out.append(s3_bucket)
    return out


def test_uri_helpers() -> None:
    assert to_uri("s3a://b/k") == "s3://b/k"
    assert to_uri("file:///tmp/x") == "/tmp/x"
    assert to_uri("file:/tmp/x") == "/tmp/x"
    assert join("s3://b/t", "a", "", "b.parquet") == "s3://b/t/a/b.parquet"
    assert join("/t/", "x") == "/t/x"
    assert parent("s3://b/t/a/f") == "s3://b/t/a"
    assert parent("/t/f") == "/t"


def _exercise(storage: Storage, root: str) -> None:
    f = join(root, "a", "b", "file.bin")
    storage.write_bytes(f, b"hello")
    assert storage.read_bytes(f) == b"hello"
    info = storage.info(f)
    assert info is not None and info.size == 5 and info.name == "file.bin" and not info.is_dir
    storage.create_if_absent(join(root, "a", "new"), b"x")
    with pytest.raises(AlreadyExistsError) as err:
        storage.create_if_absent(join(root, "a", "new"), b"y")
    assert "a/new" in str(err.value)
    assert storage.read_bytes(join(root, "a", "new")) == b"x"
    names = sorted(fi.name for fi in storage.list(join(root, "a")) if not fi.is_dir)
    assert names == ["new"]
    deep = sorted(fi.location for fi in storage.walk_files(root))
    assert deep == [join(root, "a", "b", "file.bin"), join(root, "a", "new")]
    assert storage.list(join(root, "missing")) == []
    with storage.open_output_stream(join(root, "s.bin")) as out:
        out.write(b"abc")
    with storage.open_input_file(join(root, "s.bin")) as inp:
        assert inp.read() == b"abc"
    assert storage.delete(f) is True
    # S3's DeleteObject does not say whether the key existed (one request, no HEAD first): True there
    assert storage.delete(f) is (not storage.is_local(root))
    with pytest.raises(FileMissingError):
        storage.delete(f, missing_ok=False)
    with pytest.raises(FileMissingError):
        storage.read_bytes(f)
    assert storage.info(f) is None


def test_local_storage(tmp_path: Path) -> None:
    _exercise(Storage(), str(tmp_path))


@pytest.mark.moto
def test_s3_storage_against_moto(s3_bucket: tuple[Storage, str]) -> None:
    storage, root = s3_bucket
    _exercise(storage, join(root, "table"))


@pytest.mark.moto
def test_s3a_scheme_reads_same_object(s3_bucket: tuple[Storage, str]) -> None:
    storage, root = s3_bucket
    storage.write_bytes(join(root, "k"), b"1")
    assert storage.read_bytes(join(root.replace("s3://", "s3a://"), "k")) == b"1"


def test_create_if_absent_has_one_winner(tmp_path: Path) -> None:
    storage = Storage()
    target = str(tmp_path / "instant.commit")
    wins: list[int] = []
    errors: list[BaseException] = []

    def attempt(i: int) -> None:
        try:
            storage.create_if_absent(target, str(i).encode() * 1000)
            wins.append(i)
        except AlreadyExistsError:
            pass
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(wins) == 1
    assert Path(target).read_bytes() == str(wins[0]).encode() * 1000
    assert [p.name for p in tmp_path.iterdir()] == ["instant.commit"]


def test_unsupported_scheme() -> None:
    with pytest.raises(StorageError, match="gs://b/x"):
        Storage().read_bytes("gs://b/x")


def test_created_files_are_world_readable(tmp_path: Path) -> None:
    storage = Storage()
    storage.write_bytes(str(tmp_path / "a"), b"1")
    storage.create_if_absent(str(tmp_path / "b"), b"1")
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("name", ["a\x00b", "a\nb", "a\x7fb"])
def test_control_characters_in_a_location_are_a_typed_error(tmp_path: Path, name: str) -> None:
    storage = Storage()
    location = str(tmp_path / name)
    for call in (storage.read_bytes, storage.info, storage.delete, storage.exists):
        with pytest.raises(InvalidPathError) as err:
            call(location)
        assert err.value.path == location


@pytest.mark.moto
@pytest.mark.parametrize("kind", ["reset", "timeout"])
def test_s3_conditional_put_connection_failure_is_a_storage_error(
    kind: str, s3_bucket: tuple[Storage, str], moto: MotoServer
) -> None:
    """A conditional put whose connection is reset (or held, then closed) on every attempt fails with a
    StorageError naming the file, not with botocore's own exception; the write did not land."""
    storage, root = s3_bucket
    with FaultProxy(moto.endpoint_url) as proxy:
        faulty = Storage(dataclasses.replace(storage.options, endpoint_url=proxy.endpoint_url))
        faulty.create_if_absent(join(root, "before"), b"1")
        proxy.arm(FaultPlan(kind, hold=0.5))  # every request from now on
        target = join(root, "instant")
        with pytest.raises(StorageError, match="conditional put failed") as caught:
            faulty.create_if_absent(target, b"2")
        assert caught.value.path == target
        assert proxy.injected == proxy.requests >= 1
    assert storage.exists(target) is False
    assert storage.read_bytes(join(root, "before")) == b"1"


@pytest.mark.moto
@pytest.mark.parametrize("kind", ["reset", "timeout"])
def test_a_retried_conditional_put_whose_first_attempt_landed_succeeds(
    kind: str, s3_bucket: tuple[Storage, str], moto: MotoServer
) -> None:
    """The response of the first attempt is lost after S3 applied it; botocore retries and S3 answers 412. The object
    holds our bytes, so the create succeeded. Another writer's different bytes are still a conflict."""
    storage, root = s3_bucket
    with FaultProxy(moto.endpoint_url) as proxy:
        faulty = Storage(dataclasses.replace(storage.options, endpoint_url=proxy.endpoint_url))
        faulty.create_if_absent(join(root, "warm"), b"0")  # the client is connected before the fault
        target = join(root, "instant.commit")
        proxy.arm(FaultPlan(kind, count=1, after=True, hold=0.5))
        faulty.create_if_absent(target, b"ours")
        assert proxy.injected == 1
        assert storage.read_bytes(target) == b"ours"
        other = join(root, "taken.commit")
        storage.create_if_absent(other, b"theirs")
        proxy.arm(FaultPlan(kind, count=1, after=True, hold=0.5))
        with pytest.raises(AlreadyExistsError):
            faulty.create_if_absent(other, b"ours")
    assert storage.read_bytes(other) == b"theirs"


@pytest.mark.moto
@pytest.mark.parametrize("operation", ["read", "list", "write"])
def test_a_stalled_s3_reply_fails_within_the_request_timeout(
    operation: str, s3_bucket: tuple[Storage, str], moto: MotoServer
) -> None:
    """An S3 endpoint that accepts the request and then sends nothing: with `request_timeout_s` of 1 s each
    attempt gives up after about a second, and the operation ends in a retryable StorageError naming the file
    (before, botocore waited 60 s per attempt and held the worker thread for minutes)."""
    storage, root = s3_bucket
    target = join(root, "stalled", "file.bin")
    storage.write_bytes(target, b"before")
    hold = 45.0
    with FaultProxy(moto.endpoint_url) as proxy:
        options = dataclasses.replace(
            storage.options, endpoint_url=proxy.endpoint_url, request_timeout_s=1.0, connect_timeout_s=1.0
        )
        faulty = Storage(options)
        assert faulty.read_bytes(target) == b"before"  # connected and signed before the fault
        proxy.arm(FaultPlan("timeout", hold=hold))
        started = time.monotonic()
        with pytest.raises(StorageError) as caught:
            if operation == "read":
                faulty.read_bytes(target)
            elif operation == "list":
                faulty.list(join(root, "stalled"))
            else:
                faulty.write_bytes(target, b"after")
        took = time.monotonic() - started
        assert proxy.injected >= 1
    assert caught.value.retryable is True
    assert caught.value.path in (target, join(root, "stalled"))
    assert took < hold / 2, f"{operation} waited {took:.1f}s for a reply the server held {hold}s"
    assert storage.read_bytes(target) == b"before"


def test_timeouts_travel_to_spark_tasks_and_back() -> None:
    """The timeouts are not secrets: Spark tasks get them with the endpoint and region (defaults are not sent)."""
    from tableservice.storage import StorageOptions

    options = StorageOptions(endpoint_url="http://127.0.0.1:1", region="eu-west-1", request_timeout_s=7.5)
    shared = options.shareable()
    assert shared == {"endpoint_url": "http://127.0.0.1:1", "region": "eu-west-1", "request_timeout_s": 7.5}
    again = StorageOptions(**shared)  # type: ignore[arg-type]
    assert (again.request_timeout_s, again.connect_timeout_s) == (7.5, StorageOptions().connect_timeout_s)
    assert StorageOptions(access_key_id="k", secret_access_key="s").shareable() == {}
