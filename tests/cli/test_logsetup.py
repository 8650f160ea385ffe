from __future__ import annotations

import json
import logging

import pytest

from tableservice.cli.logsetup import JsonFormatter, TextFormatter, configure_logging, redact


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


def test_a_record_with_a_trace_as_text_keeps_it_on_one_json_line() -> None:
    record = _record("an error in the JVM")
    record.exc_text = "java.lang.RuntimeException: boom\n\tat org.example.A.b(A.java:1)"
    data = json.loads(JsonFormatter().format(record))
    assert (data["message"], data["exception"]) == ("an error in the JVM", record.exc_text)
    assert TextFormatter().format(record).endswith("an error in the JVM\n" + record.exc_text)


def test_json_logging_turns_uncaught_exceptions_and_warnings_into_events(capsys: pytest.CaptureFixture[str]) -> None:
    import sys
    import threading
    import warnings

    saved = (sys.excepthook, threading.excepthook, logging.getLogger().handlers[:], logging.getLogger().level)
    try:
        configure_logging("INFO", "json")
        try:
            raise ValueError("lost")
        except ValueError as e:
            sys.excepthook(type(e), e, e.__traceback__)
        thread = threading.Thread(target=lambda: 1 / 0, name="worker-1")
        thread.start()
        thread.join()
        with warnings.catch_warnings():  # pytest records warnings itself: route this one as configure_logging does
            warnings.simplefilter("always")
            logging.captureWarnings(False)
            logging.captureWarnings(True)
            try:
                warnings.warn("mind the gap", UserWarning, stacklevel=1)
            finally:
                logging.captureWarnings(False)
    finally:
        sys.excepthook, threading.excepthook = saved[0], saved[1]
        root = logging.getLogger()
        root.handlers[:] = saved[2]
        root.setLevel(saved[3])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    # only this test's records: another thread (py4j, a leftover client) may log while the root logger is at INFO
    events = [e for e in map(json.loads, lines) if e["logger"] in ("tableservice", "py.warnings")]
    got = [(e["level"], e["logger"], e["message"].splitlines()[0]) for e in events]
    assert got[:2] == [
        ("CRITICAL", "tableservice", "uncaught ValueError: lost"),
        ("CRITICAL", "tableservice", "uncaught ZeroDivisionError in thread worker-1: division by zero"),
    ]
    assert "raise ValueError" in events[0]["exception"] and "ZeroDivisionError" in events[1]["exception"]
    assert got[2][:2] == ("WARNING", "py.warnings") and "UserWarning: mind the gap" in events[2]["message"]
