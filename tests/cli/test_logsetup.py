from __future__ import annotations

import json
import logging

import pytest

from tableservice.cli.logsetup import JsonFormatter, TextFormatter, redact


def _record(msg: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("tableservice.test", logging.INFO, __file__, 1, msg, (), None)
    for k, v in extra.items():
        setattr(record, k, v)
    return record


def test_json_lines_carry_table_and_instant() -> None:
    line = JsonFormatter().format(_record("compacted 3 groups", table="trips", instant="20250101000000000"))
    data = json.loads(line)
    assert data["message"] == "compacted 3 groups"
    assert data["table"] == "trips" and data["instant"] == "20250101000000000"
    assert data["level"] == "INFO" and data["logger"] == "tableservice.test"


def test_text_lines_carry_context() -> None:
    line = TextFormatter().format(_record("rolled back", table="trips", instant="1"))
    assert line.endswith("[table=trips instant=1]")


def test_http_lines_carry_the_listening_address() -> None:
    record = _record("HTTP endpoints listening", address="0.0.0.0:9464")
    assert TextFormatter().format(record).endswith("HTTP endpoints listening [address=0.0.0.0:9464]")
    assert json.loads(JsonFormatter().format(record))["address"] == "0.0.0.0:9464"


@pytest.mark.parametrize("text", ["aws_secret_access_key=AKIAXYZ", "password: hunter2", "token=abc.def"])
def test_secrets_are_masked(text: str) -> None:
    masked = redact(f"connecting with {text} now")
    assert "***" in masked
    assert text.split("=")[-1].split(": ")[-1] not in masked
    assert "***" in JsonFormatter().format(_record(f"x {text}"))
