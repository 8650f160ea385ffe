"""The driver JVM's output relayed into Python logging (no JVM here: the lines a JVM writes, fed through a pipe)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator

import pytest

from tableservice.cli.logsetup import JsonFormatter
from tableservice.executors.jvm_output import (
    JAVA_OPTIONS_KEY,
    PROGRESS_KEY,
    driver_conf,
    log4j2_properties,
    log4j_level,
    record_for,
    start_relays,
    user_configures_log4j,
)


def _log4j_line(level: str, logger: str, message: str, exception: str = "", millis: int = 1_767_225_600_123) -> str:
    """A line as the daemon's log4j2 pattern writes it (message and trace escaped by `%enc{...}{JSON}`)."""
    enc = json.dumps
    return (
        f'{{"tableservice-jvm":1,"time":{millis},"level":"{level}","logger":{enc(logger)},'
        f'"message":{enc(message)},"exception":{enc(exception)}}}'
    )


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(JsonFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture()
def collected() -> Iterator[_Collect]:
    handler = _Collect()
    jvm = logging.getLogger("jvm")
    old_level = jvm.level
    jvm.addHandler(handler)
    jvm.setLevel(logging.DEBUG)
    yield handler
    jvm.removeHandler(handler)
    jvm.setLevel(old_level)


def test_a_log4j_event_keeps_its_level_logger_time_message_and_trace() -> None:
    trace = "java.lang.RuntimeException: boom\n\tat org.example.A.b(A.java:1)"
    record = record_for(
        _log4j_line("ERROR", "org.apache.spark.executor.Executor", 'a "quoted"\nmessage', trace), "stdout"
    )
    assert (record.name, record.levelno) == ("jvm.org.apache.spark.executor.Executor", logging.ERROR)
    assert record.getMessage() == 'a "quoted"\nmessage'
    assert record.created == pytest.approx(1_767_225_600.123)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    data = json.loads(line)
    assert data["time"] == "2026-01-01T00:00:00.123+00:00"
    assert data["exception"] == trace
    assert (data["level"], data["logger"]) == ("ERROR", "jvm.org.apache.spark.executor.Executor")


@pytest.mark.parametrize(
    ("line", "source", "level"),
    [
        ("WARNING: Using incubator modules: jdk.incubator.vector", "stderr", logging.DEBUG),
        ("Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties", "stderr", logging.DEBUG),
        ("[Stage 0:>                                      (0 + 1) / 2]", "stderr", logging.DEBUG),
        ("Traceback (most recent call last):", "stderr", logging.WARNING),
        ("printed by a worker", "stdout", logging.INFO),
        ("26/11/25 22:40:24 WARN NativeCodeLoader: Unable to load native-hadoop library", "stderr", logging.WARNING),
        ("2026-11-25T22:40:23.98Z main ERROR Reconfiguration failed: No configuration found", "stdout", logging.ERROR),
        ("26/11/25 22:40:24 INFO SparkContext: Running Spark version 4.0.1", "stderr", logging.INFO),
        ("WARNING: An illegal reflective access operation has occurred", "stderr", logging.WARNING),
        ("a line whose sixth word is INFO here", "stderr", logging.WARNING),
        ("ERROR details follow", "stderr", logging.ERROR),
        ('{"tableservice-jvm":1, not json', "stdout", logging.INFO),
    ],
)
def test_other_lines_become_records_of_the_stream(line: str, source: str, level: int) -> None:
    record = record_for(line, source)
    assert (record.name, record.levelno, record.getMessage()) == (f"jvm.{source}", level, line)


def test_relays_split_progress_frames_and_keep_every_line(collected: _Collect) -> None:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    threads = start_relays(os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"))
    warn = _log4j_line("WARN", "org.apache.spark.SparkConf", "deprecated key")
    os.write(out_w, (warn[:20]).encode())  # a line arriving in pieces is still one event
    os.write(out_w, (warn[20:] + "\n").encode())
    os.write(err_w, b"\r[Stage 0:>   (0 + 1) / 2]\r[Stage 0:=>  (1 + 1) / 2]\r\rworker said \xc3\xa9\n\n")
    os.close(out_w)
    os.close(err_w)
    for t in threads:
        t.join(10)
        assert not t.is_alive()
    events = sorted((json.loads(line) for line in collected.lines), key=lambda e: (e["logger"], e["message"]))
    got = [(e["logger"], e["level"], e["message"]) for e in events]
    assert got == [
        ("jvm.org.apache.spark.SparkConf", "WARNING", "deprecated key"),
        ("jvm.stderr", "DEBUG", "[Stage 0:=>  (1 + 1) / 2]"),
        ("jvm.stderr", "DEBUG", "[Stage 0:>   (0 + 1) / 2]"),
        ("jvm.stderr", "WARNING", "worker said é"),
    ]
    assert all("\r" not in line and "\n" not in line for line in collected.lines)


def test_a_relay_drops_what_the_daemon_level_drops(collected: _Collect) -> None:
    logging.getLogger("jvm").setLevel(logging.WARNING)
    r, w = os.pipe()
    (thread,) = start_relays(os.fdopen(r, "rb"), None)
    os.write(w, (_log4j_line("INFO", "org.example.A", "chatter") + "\n").encode())
    os.write(w, (_log4j_line("ERROR", "org.example.A", "failure") + "\n").encode())
    os.close(w)
    thread.join(10)
    assert not thread.is_alive()
    assert [json.loads(line)["message"] for line in collected.lines] == ["failure"]


@pytest.mark.parametrize(
    ("spark", "daemon", "expected"),
    [
        ("WARN", "INFO", "WARN"),
        ("warning", "DEBUG", "WARN"),
        ("INFO", "ERROR", "ERROR"),
        ("OFF", "INFO", "OFF"),
        ("DEBUG", "DEBUG", "DEBUG"),
        ("ERROR", "CRITICAL", "FATAL"),
        ("TRACE", "WARNING", "WARN"),
    ],
)
def test_the_jvm_level_is_never_below_the_daemons(spark: str, daemon: str, expected: str) -> None:
    assert log4j_level(spark, daemon) == expected


def test_the_configuration_logs_one_json_line_per_event_at_the_level() -> None:
    text = log4j2_properties("ERROR")
    props = dict(line.split(" = ", 1) for line in text.splitlines() if " = " in line and not line.startswith("#"))
    assert props["rootLogger.level"] == "ERROR"
    assert props["appender.out.target"] == "SYSTEM_OUT"
    assert props["appender.out.layout.alwaysWriteExceptions"] == "false"
    pattern = props["appender.out.layout.pattern"]
    assert pattern.endswith("%n") and pattern.count("%n") == 1
    for field in ("%enc{%m}{JSON}", "%enc{%throwable}{JSON}", "%enc{%c}{JSON}"):
        assert field in pattern
    assert "logger.nativecode.level = WARN" not in log4j2_properties("WARN")
    assert "logger.nativecode.level = ERROR" in log4j2_properties("WARN")


def test_driver_conf_keeps_the_users_options_and_progress_choice() -> None:
    plain = driver_conf({"spark.driver.memory": "2g"}, "/tmp/x/log4j2.properties")
    assert plain == {
        "spark.driver.memory": "2g",
        PROGRESS_KEY: "false",
        JAVA_OPTIONS_KEY: "-Dlog4j2.configurationFile=/tmp/x/log4j2.properties",
    }
    user = {JAVA_OPTIONS_KEY: " -Xss4m -Dfoo=bar ", PROGRESS_KEY: "true"}
    merged = driver_conf(user, "/tmp/a b/log4j2.properties")
    assert merged[JAVA_OPTIONS_KEY] == '-Xss4m -Dfoo=bar -Dlog4j2.configurationFile="/tmp/a b/log4j2.properties"'
    assert merged[PROGRESS_KEY] == "true"
    assert driver_conf(user, None) == {**user}
    assert user_configures_log4j({JAVA_OPTIONS_KEY: "-Dlog4j.configurationFile=file:/etc/l.xml"})
    assert user_configures_log4j({JAVA_OPTIONS_KEY: "-Xmx1g -Dlog4j2.configurationFile=/etc/l.properties"})
    assert not user_configures_log4j({JAVA_OPTIONS_KEY: "-Xmx1g"})
    assert not user_configures_log4j({})
