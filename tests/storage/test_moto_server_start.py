"""The tests' moto server chooses another port when the one it chose was taken before the server bound it."""

from __future__ import annotations

import socket

import boto3
import pytest

from tests.support import servers


@pytest.mark.moto
def test_a_port_taken_before_the_server_binds_it_is_chosen_again(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))  # bound, as an outgoing connection's port is, and not listening
        taken_port = int(taken.getsockname()[1])
        chosen: list[int] = []
        real_free_port = servers.free_port

        def next_port() -> int:  # the taken port first, then free ones
            chosen.append(real_free_port() if chosen else taken_port)
            return chosen[-1]

        monkeypatch.setattr(servers, "free_port", next_port)
        with servers.moto_server() as moto:
            s3 = boto3.client(
                "s3",
                endpoint_url=moto.endpoint_url,
                region_name=moto.region,
                aws_access_key_id=moto.access_key_id,
                aws_secret_access_key=moto.secret_access_key,
            )
            s3.create_bucket(Bucket="probe-bucket")
            assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["probe-bucket"]
        assert chosen[0] == taken_port and len(chosen) == 2  # chosen again once, after the taken port
        assert moto.endpoint_url == f"http://127.0.0.1:{chosen[1]}" and chosen[1] != taken_port
