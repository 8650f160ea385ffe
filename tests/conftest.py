from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import MotoServer, moto_server

from tableservice.storage import Storage, StorageOptions


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    with moto_server() as server:
        yield server


@pytest.fixture()
def s3_bucket(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> tuple[Storage, str]:
    """A fresh bucket on the moto server and a Storage configured for it; returns (storage, s3://bucket)."""
    import boto3

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto.secret_access_key)
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=moto.endpoint_url, region_name=moto.region)
    client.create_bucket(Bucket=bucket)
    options = StorageOptions(
        endpoint_url=moto.endpoint_url,
        region=moto.region,
        access_key_id=moto.access_key_id,
        secret_access_key=moto.secret_access_key,
    )
    return Storage(options), f"s3://{bucket}"
