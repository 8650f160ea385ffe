"""Logging for the daemon and the command line: text or JSON lines, with table and instant on every record
that is about them (pass `extra={"table": ..., "instant": ...}`), and no secrets."""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from tableservice.errors import redact_url_credentials

CONTEXT_FIELDS = ("table", "instant", "action", "address")
_SECRET = re.compile(r"(?i)(secret|password|token|credential|aws_secret_access_key)(\s*[=:]\s*)([^\s,;]+)")


def redact(text: str) -> str:
    """Mask values that follow secret-looking keys, and credentials inside URLs (`user:password@`, `token=`)."""
    return _SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}***", redact_url_credentials(text))


class RedactingFormatter(logging.Formatter):
    """A plain `logging.Formatter` (the command line's) whose lines go through `redact`."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ctx = " ".join(f"{k}={getattr(record, k)}" for k in CONTEXT_FIELDS if getattr(record, k, None) is not None)
        stamp = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        line = f"{stamp} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if ctx:
            line += f" [{ctx}]"
        exception = _exception_text(self, record)
        if exception:
            line += "\n" + exception
        return redact(line)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        for key in CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        exception = _exception_text(self, record)
        if exception:
            out["exception"] = redact(exception)
        return json.dumps(out, default=str)


def _exception_text(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    """The record's traceback: formatted from `exc_info`, or the text it came with (`exc_text`: a JVM stack trace)."""
    if record.exc_info:
        return formatter.formatException(record.exc_info)
    return record.exc_text or ""


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    """One handler on stderr for the whole process. Python warnings become records of `py.warnings`; with JSON, an
    uncaught exception (main thread or another) becomes one record too instead of a raw traceback."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("py4j", "botocore", "urllib3", "kazoo"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    logging.captureWarnings(True)
    if fmt == "json":
        sys.excepthook = _log_uncaught
        threading.excepthook = _log_uncaught_in_thread


def _log_uncaught(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    logging.getLogger("tableservice").critical("uncaught %s: %s", kind.__name__, value, exc_info=(kind, value, tb))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    value = args.exc_value if args.exc_value is not None else args.exc_type()
    name = args.thread.name if args.thread is not None else "?"
    logging.getLogger("tableservice").critical(
        "uncaught %s in thread %s: %s",
        args.exc_type.__name__,
        name,
        value,
        exc_info=(args.exc_type, value, args.exc_traceback),
    )
