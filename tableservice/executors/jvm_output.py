"""The driver JVM's output as the daemon's own log events.

PySpark starts the driver JVM with `spark-submit`, and the JVM writes to the standard streams it was given: log4j2's
console appender, Spark's banners, the JVM's own notices, the console progress bar (carriage returns, no newline)
and, copied raw onto the JVM's stderr, whatever the Python workers print. Inherited, all of that lands between the
daemon's lines and glues onto them. Here the daemon launches the JVM itself with both streams on pipes, and
threads turn every line into one log record:

- log4j2 events, formatted by a configuration the daemon writes (`log4j2_properties`: one JSON object a line, on
  the JVM's stdout, the root logger at `level`), become records of the logger `jvm.<the log4j logger>` at the
  event's level, time and message, with its stack trace as the record's exception text;
- any other line (stdout or stderr, split on `\\r` as well as `\\n`) becomes a record of `jvm.stdout` or
  `jvm.stderr`: at the level named among its first words (a user's own log4j layout), else WARNING on stderr and
  INFO on stdout; DEBUG for known start-up notices and progress-bar frames.

Records pass through Python logging, so the daemon's level and format (text or JSON lines) apply.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from typing import IO, Any

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: log4j2 level names, least severe first, with the Python level each becomes.
LOG4J_LEVELS: dict[str, int] = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}
_BY_PYTHON_LEVEL = [("DEBUG", logging.DEBUG), ("INFO", logging.INFO), ("WARN", logging.WARNING)]

PROGRESS_KEY = "spark.ui.showConsoleProgress"
JAVA_OPTIONS_KEY = "spark.driver.extraJavaOptions"
_CONFIG_PROPERTY = re.compile(r"-Dlog4j2?\.configurationFile=")
_MARK = "tableservice-jvm"

# Lines a JVM or Spark prints at start whatever the logging configuration says: not worth a warning.
_NOTICES = (
    re.compile(r"^WARNING: Using incubator modules: "),
    re.compile(r"^Using Spark's default log4j profile: "),
    re.compile(r"^Setting default log level to "),
    re.compile(r"^To adjust logging level use sc\.setLogLevel"),
    re.compile(r"^\[Stage \d+.*\]\s*$"),  # a console progress bar frame (when spark.conf turns it on)
)


# A level word among a plain line's first three words (log4j's default and status layouts, the JVM's warnings).
_NAMED_LEVEL = re.compile(r"^(?:\S+\s+){0,2}?(TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL)\b:?\s")


def log4j_level(spark_level: str, daemon_level: str) -> str:
    """The JVM's root log level: `spark_level`, raised to the daemon's own level when that is more severe (events
    below the daemon's level would be dropped after crossing the pipe anyway)."""
    spark = spark_level.strip().upper()
    if spark == "WARNING":
        spark = "WARN"
    if spark not in LOG4J_LEVELS:
        raise ValueError(f"not a log4j level: {spark_level!r}")
    floor = logging.getLevelName(daemon_level.strip().upper())
    if not isinstance(floor, int):
        raise ValueError(f"not a Python log level: {daemon_level!r}")
    beyond = "FATAL" if floor >= logging.CRITICAL else "ERROR"
    daemon = next((name for name, value in _BY_PYTHON_LEVEL if floor <= value), beyond)
    return spark if LOG4J_LEVELS[spark] >= LOG4J_LEVELS[daemon] else daemon


def log4j2_properties(level: str) -> str:
    """A log4j2 configuration for the driver JVM: every event one JSON object on one line of stdout (message and
    stack trace escaped, so neither can break the line), the root logger at `level`, and the start-up warnings
    Spark's own default profile silences silenced too."""
    record = (
        f'{{"{_MARK}":1,"time":%d{{UNIX_MILLIS}},"level":"%p","logger":"%enc{{%c}}{{JSON}}",'
        '"message":"%enc{%m}{JSON}","exception":"%enc{%throwable}{JSON}"}%n'
    )
    quiet = {
        "nativecode": "org.apache.hadoop.util.NativeCodeLoader",
        "jetty": "org.sparkproject.jetty",
        "parquet": "org.apache.parquet",
        "hiveudf": "org.apache.hadoop.hive.ql.exec.FunctionRegistry",
        "hivemeta": "org.apache.hadoop.hive.metastore.RetryingHMSHandler",
    }
    lines = [
        "# written by tableservice: the driver JVM's log events, one JSON line each, for the daemon to re-emit",
        "status = error",
        "name = tableservice",
        "appender.out.type = Console",
        "appender.out.name = out",
        "appender.out.target = SYSTEM_OUT",
        "appender.out.layout.type = PatternLayout",
        "appender.out.layout.alwaysWriteExceptions = false",
        f"appender.out.layout.pattern = {record}",
        f"rootLogger.level = {level}",
        "rootLogger.appenderRef.out.ref = out",
    ]
    for key, name in quiet.items():
        if LOG4J_LEVELS[level] < LOG4J_LEVELS["ERROR"]:
            lines += [f"logger.{key}.name = {name}", f"logger.{key}.level = ERROR"]
    return "\n".join(lines) + "\n"


def user_configures_log4j(conf: Mapping[str, str]) -> bool:
    """Whether the user's Spark conf names its own log4j configuration for the driver (then it is left alone)."""
    return bool(_CONFIG_PROPERTY.search(conf.get(JAVA_OPTIONS_KEY, "")))


def driver_conf(conf: Mapping[str, str], config_file: str | None) -> dict[str, str]:
    """The user's Spark conf with the console progress bar off unless it says otherwise and, with `config_file`,
    the log4j2 configuration appended to the driver's Java options (the user's options kept, before ours)."""
    out = dict(conf)
    out.setdefault(PROGRESS_KEY, "false")
    if config_file is not None:
        ours = f"-Dlog4j2.configurationFile={_quote(config_file)}"
        user = out.get(JAVA_OPTIONS_KEY, "").strip()
        out[JAVA_OPTIONS_KEY] = f"{user} {ours}" if user else ours
    return out


def _quote(path: str) -> str:
    """A path as one word of Spark's option-string syntax (double quotes when it holds blanks or quotes)."""
    if re.fullmatch(r"[\w./:@%+=,-]+", path):
        return path
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _fragments(stream: IO[bytes]) -> Iterator[str]:
    """Decoded lines of a stream, split on carriage returns too, blanks dropped."""
    for raw in iter(stream.readline, b""):
        for part in re.split(r"[\r\n]+", raw.decode("utf-8", errors="replace")):
            if part.strip():
                yield part.rstrip()


def record_for(line: str, source: str) -> logging.LogRecord:
    """The log record one line of the JVM's `source` stream ("stdout" or "stderr") becomes."""
    event = _event(line)
    if event is not None:
        level = LOG4J_LEVELS.get(str(event.get("level", "")).upper(), logging.WARNING)
        name = f"jvm.{event.get('logger') or 'root'}"
        record = logging.getLogger(name).makeRecord(name, level, "(jvm)", 0, str(event.get("message", "")), (), None)
        millis = event.get("time")
        if isinstance(millis, int | float) and not isinstance(millis, bool):
            record.created = millis / 1000.0
            record.msecs = millis % 1000
        exception = str(event.get("exception") or "").strip()
        if exception:
            record.exc_text = exception
        return record
    name = f"jvm.{source}"
    named = _NAMED_LEVEL.match(line)
    if any(p.search(line) for p in _NOTICES):
        level = logging.DEBUG
    elif named is not None:  # e.g. `26/11/25 22:40:24 WARN NativeCodeLoader: ...` under a log4j config of the user's
        level = LOG4J_LEVELS["WARN" if named.group(1) == "WARNING" else named.group(1)]
    else:
        level = logging.WARNING if source == "stderr" else logging.INFO
    return logging.getLogger(name).makeRecord(name, level, "(jvm)", 0, line, (), None)


def _event(line: str) -> dict[str, Any] | None:
    if not line.startswith(f'{{"{_MARK}":'):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


_exiting = threading.Event()


def _stop_emitting() -> None:
    """At interpreter exit (before logging's own shutdown, registered earlier, runs), relays stop writing: a daemon
    thread holding stderr's lock while the interpreter finalizes would abort it. What the JVM writes after that
    is read and dropped."""
    _exiting.set()


atexit.register(_stop_emitting)


def relay(stream: IO[bytes], source: str) -> None:
    """Re-emit every line of `stream` through Python logging until it closes (the JVM exited)."""
    try:
        for line in _fragments(stream):
            if _exiting.is_set():
                continue
            record = record_for(line, source)
            logger = logging.getLogger(record.name)
            if logger.isEnabledFor(record.levelno):
                logger.handle(record)
    except Exception:  # a relay must never die silently while the JVM writes into a full pipe
        log.exception("relaying the JVM's %s failed; the rest of it is discarded", source)
        for _ in iter(lambda: stream.read(65536), b""):
            pass


def start_relays(stdout: IO[bytes] | None, stderr: IO[bytes] | None) -> list[threading.Thread]:
    """One daemon thread per piped stream of the JVM."""
    threads = []
    for stream, source in ((stdout, "stdout"), (stderr, "stderr")):
        if stream is not None:
            thread = threading.Thread(target=relay, args=(stream, source), name=f"jvm-{source}-relay", daemon=True)
            thread.start()
            threads.append(thread)
    return threads


def write_config(directory: str, level: str) -> str:
    """Write the log4j2 configuration into `directory`; its path."""
    path = os.path.join(directory, "log4j2-tableservice.properties")
    with open(path, "w", encoding="utf-8") as f:
        f.write(log4j2_properties(level))
    return path


def classic_session(options: Mapping[str, str], jvm_log_level: str | None) -> SparkSession:
    """A classic SparkSession on `options` (`spark.master`, `spark.app.name` and the rest of the conf). With
    `jvm_log_level`, a driver JVM this call launches writes into pipes relayed into Python logging, logs through the
    daemon's log4j2 configuration at that level (unless the user's `spark.driver.extraJavaOptions` names a log4j
    configuration of its own) and shows no console progress bar unless the conf turns it on."""
    from pyspark import SparkConf, SparkContext

    if jvm_log_level is None:
        return _builder(options).getOrCreate()
    own_config = not user_configures_log4j(options)
    if SparkContext._gateway is not None:  # an earlier session's JVM (its output already goes where it goes)
        session = _builder(driver_conf(options, None)).getOrCreate()
        if own_config:
            session.sparkContext.setLogLevel(jvm_log_level)
        return session
    folder = tempfile.mkdtemp(prefix="tableservice-log4j2-") if own_config else None
    try:
        conf_map = driver_conf(options, write_config(folder, jvm_log_level) if folder is not None else None)
        conf = SparkConf()
        for key, value in conf_map.items():
            conf.set(key, value)
        SparkContext(conf=conf, gateway=_launch_relayed(conf))
        return _builder(conf_map).getOrCreate()  # the SparkContext just made, in a session with these options
    finally:
        if folder is not None:  # log4j2 read it when the JVM started
            shutil.rmtree(folder, ignore_errors=True)


def _builder(options: Mapping[str, str]) -> SparkSession.Builder:
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    return builder


def _launch_relayed(conf: Any) -> Any:
    """PySpark's gateway launch with the JVM's stdout and stderr on pipes whose relays run from the start, so that
    what a JVM that fails to start says is logged too."""
    from pyspark.java_gateway import launch_gateway

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    start_relays(os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"))
    try:
        return launch_gateway(conf, popen_kwargs={"stdout": out_w, "stderr": err_w})  # type: ignore[no-untyped-call]
    finally:  # the JVM holds its own copies; the relays end when it exits
        os.close(out_w)
        os.close(err_w)
