"""The bearer token of the HTTP endpoints, and the warning when they are exposed without one."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tableservice.config import HttpSettings
from tableservice.errors import ConfigError
from tableservice.service.http import log_exposure
from tableservice.service.wiring import status_token
from tests.service.test_http import get, make_daemon, running

TOKEN = "s3cr3t-T0ken_value.42"
HTTP_LOGGER = "tableservice.service.http"


@pytest.fixture()
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_status_needs_the_bearer_token_and_probes_and_metrics_never_do() -> None:
    daemon, routes = make_daemon()
    daemon.health.set_ready(True)
    async with running(routes, bearer_token=TOKEN) as port:
        without = await get(port, "/status")
        wrong = await get(port, "/status", headers="Authorization: Bearer s3cr3t-T0ken_value.43\r\n")
        prefix = await get(port, "/status", headers=f"Authorization: Bearer {TOKEN[:-1]}\r\n")
        basic = await get(port, "/status", headers=f"Authorization: Basic {TOKEN}\r\n")
        right = await get(port, "/status", headers=f"Authorization: Bearer {TOKEN}\r\n")
        lower_scheme = await get(port, "/status", headers=f"authorization: bearer  {TOKEN}\r\n")
        head = await get(port, "/status", method="HEAD", headers=f"Authorization: Bearer {TOKEN}\r\n")
        open_paths = {path: await get(port, path) for path in ("/healthz", "/readyz", "/metrics")}
        unknown = await get(port, "/nope")
    for denied in (without, wrong, prefix, basic):
        assert (denied.status, denied.body) == (401, b"/status needs a bearer token\n")
        assert denied.headers["www-authenticate"] == 'Bearer realm="tableservice"'
    assert (right.status, json.loads(right.body)) == (200, daemon.status)
    assert (lower_scheme.status, json.loads(lower_scheme.body)) == (200, daemon.status)
    assert (head.status, head.body, int(head.headers["content-length"])) == (200, b"", len(right.body))
    assert {path: reply.status for path, reply in open_paths.items()} == {
        "/healthz": 200,
        "/readyz": 200,
        "/metrics": 200,
    }
    assert b"tableservice_up" in open_paths["/metrics"].body
    assert unknown.status == 404


@pytest.mark.anyio
async def test_without_a_token_status_is_open(caplog: pytest.LogCaptureFixture) -> None:
    daemon, routes = make_daemon()
    with caplog.at_level(logging.INFO, logger=HTTP_LOGGER):
        async with running(routes) as port:
            reply = await get(port, "/status")
    assert (reply.status, json.loads(reply.body)) == (200, daemon.status)
    # Loopback: no warning; the start is logged with the address as a field.
    records = [r for r in caplog.records if r.name == HTTP_LOGGER]
    assert [r.levelname for r in records] == ["INFO"]
    assert records[0].address == f"127.0.0.1:{port}"  # type: ignore[attr-defined]


def test_exposure_warning_for_any_address_but_loopback_without_a_token(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=HTTP_LOGGER):
        warned = {
            "0.0.0.0": log_exposure([("0.0.0.0", 9464)], ["/status"], has_token=False),
            "::": log_exposure([("::", 9464)], ["/status"], has_token=False),
            "10.1.2.3": log_exposure([("10.1.2.3", 9464)], ["/status"], has_token=False),
            "127.0.0.1": log_exposure([("127.0.0.1", 9464)], ["/status"], has_token=False),
            "127.0.0.2": log_exposure([("127.0.0.2", 9464)], ["/status"], has_token=False),
            "::1": log_exposure([("::1", 9464)], ["/status"], has_token=False),
            "0.0.0.0 with token": log_exposure([("0.0.0.0", 9464)], ["/status"], has_token=True),
            "0.0.0.0 probes only": log_exposure([("0.0.0.0", 9464)], [], has_token=False),
        }
    assert warned == {
        "0.0.0.0": True,
        "::": True,
        "10.1.2.3": True,
        "127.0.0.1": False,
        "127.0.0.2": False,
        "::1": False,
        "0.0.0.0 with token": False,
        "0.0.0.0 probes only": False,
    }
    assert [r.address for r in caplog.records] == ["0.0.0.0:9464", "[::]:9464", "10.1.2.3:9464"]  # type: ignore[attr-defined]
    assert caplog.records[0].getMessage() == (
        "HTTP endpoints listen beyond loopback on 0.0.0.0:9464 without a bearer token: /status open to anyone "
        "who can reach the port; set service.http.status_token_file to require one"
    )


def test_status_token_is_read_from_its_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"  {TOKEN}\n")
    assert status_token(HttpSettings(status_token_file=str(token_file))) == TOKEN
    assert status_token(HttpSettings()) is None


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot read the bearer token from {file}: [Errno 2] No such file or directory"),
        ("\n", "{file} must hold one bearer token (1 to 4096 printable characters, no spaces)"),
        ("two words\n", "{file} must hold one bearer token (1 to 4096 printable characters, no spaces)"),
    ],
)
def test_a_bad_status_token_file_stops_the_start(tmp_path: Path, content: str | None, problem: str) -> None:
    token_file = tmp_path / "token"
    if content is not None:
        token_file.write_text(content)
    with pytest.raises(ConfigError) as caught:
        status_token(HttpSettings(status_token_file=str(token_file)))
    message = str(caught.value)
    assert message.startswith("service.http.status_token_file: " + problem.format(file=token_file))
    assert "two words" not in message
