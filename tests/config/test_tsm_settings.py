"""`service.table_service_manager`: off by default, a token file required when on, the token read from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tableservice.config import ConfigValidationError, TableServiceManagerSettings, parse_config
from tableservice.errors import ConfigError
from tableservice.service.wiring import tsm_token


def test_off_by_default_and_a_token_file_is_required_when_on(tmp_path: Path) -> None:
    assert parse_config("").service.table_service_manager == TableServiceManagerSettings(
        enabled=False, token_file=None, register_on_request=False
    )
    with pytest.raises(ConfigValidationError) as info:
        parse_config("service:\n  table_service_manager:\n    enabled: true\n")
    assert [(i.path, i.message) for i in info.value.issues] == [
        ("service.table_service_manager.token_file", "the endpoint needs a token file when it is enabled")
    ]
    text = f"service:\n  table_service_manager: {{enabled: true, token_file: {tmp_path / 't'}}}\n"
    assert parse_config(text).service.table_service_manager.token_file == str(tmp_path / "t")


def test_the_token_is_read_from_its_file_and_a_bad_file_is_refused(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("  tsm-token.1\n")
    settings = TableServiceManagerSettings(enabled=True, token_file=str(token_file))
    assert tsm_token(settings) == "tsm-token.1"
    assert tsm_token(TableServiceManagerSettings()) is None
    token_file.write_text("two words\n")
    with pytest.raises(ConfigError) as caught:
        tsm_token(settings)
    assert str(caught.value).startswith(
        f"service.table_service_manager.token_file: {token_file} must hold one bearer token (1 to 4096 printable "
        "characters, no spaces)"
    )
    assert "two words" not in str(caught.value)
