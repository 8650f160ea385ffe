"""File names of base files, log files and partition paths, following Hudi's naming rules.

- Base file: `<fileId>_<writeToken>_<instantTime>.<ext>`.
- Log file: `.<fileId>_<instantTime>.log.<version>_<writeToken>` (optional `.cdc` suffix). In table version 6
  the instant is the base instant of the file slice and the version grows with each new log file of the slice;
  from version 8 it is the requested time of the delta commit that wrote the file and the version is 1.
- Write token: `<taskPartitionId>-<stageId>-<taskAttemptId>`.
- File id: `<uuid>-<n>`.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from tableservice.errors import InvalidPlanError

PARTITION_METADATA_FILE = ".hoodie_partition_metadata"
DEFAULT_PARTITION_PATH = "__HIVE_DEFAULT_PARTITION__"
UNKNOWN_WRITE_TOKEN = "1-0-1"
DEFAULT_WRITE_TOKEN = "0-0-0"

_BASE_RE = re.compile(r"^([^_/]+)_([^_/]+)_(\d{14,20})(\.[A-Za-z0-9]+)$")
_LOG_RE = re.compile(r"^\.([^/]+)_(\d{14,20}|[^_/]*)\.(log|archive)\.(\d+)(?:_(\d+-\d+-\d+))?(\.cdc)?$")


@dataclass(frozen=True)
class BaseFileName:
    file_id: str
    write_token: str
    instant_time: str
    extension: str = ".parquet"

    @property
    def name(self) -> str:
        return f"{self.file_id}_{self.write_token}_{self.instant_time}{self.extension}"


@dataclass(frozen=True)
class LogFileName:
    file_id: str
    instant_time: str
    version: int
    write_token: str | None
    extension: str = "log"
    cdc: bool = False

    @property
    def name(self) -> str:
        token = f"_{self.write_token}" if self.write_token is not None else ""
        return f".{self.file_id}_{self.instant_time}.{self.extension}.{self.version}{token}{'.cdc' if self.cdc else ''}"

    @property
    def sort_key(self) -> tuple[str, int, str]:
        """Order of log files within a file slice: instant, then version, then write token."""
        return (self.instant_time, self.version, self.write_token or "")


def parse_base_file_name(name: str) -> BaseFileName | None:
    m = _BASE_RE.match(name)
    if m is None:
        return None
    return BaseFileName(m.group(1), m.group(2), m.group(3), m.group(4))


def parse_log_file_name(name: str) -> LogFileName | None:
    m = _LOG_RE.match(name)
    if m is None:
        return None
    return LogFileName(
        file_id=m.group(1),
        instant_time=m.group(2),
        version=int(m.group(4)),
        write_token=m.group(5),
        extension=m.group(3),
        cdc=m.group(6) is not None,
    )


def is_data_file_name(name: str) -> bool:
    return parse_base_file_name(name) is not None or parse_log_file_name(name) is not None


def make_write_token(task_partition_id: int, stage_id: int, task_attempt_id: int) -> str:
    return f"{task_partition_id}-{stage_id}-{task_attempt_id}"


def new_file_id(index: int = 0) -> str:
    """A new file group id: a random UUID and an index, as Hudi's writers create them."""
    return f"{uuid.uuid4()}-{index}"


# --- partition paths -------------------------------------------------------------------------------

_ESCAPE_CHARS = frozenset("\"#%'*/:=?\\\x7f{[]^") | frozenset(chr(c) for c in range(1, 0x20))


def escape_partition_value(value: str) -> str:
    """Hudi's (and Hive's) partition path escaping, used when `partitionpath.urlencode` is true."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPE_CHARS else c for c in value)


def unescape_partition_value(value: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(value):
        c = value[i]
        if c == "%" and i + 2 < len(value) and re.fullmatch(r"[0-9A-Fa-f]{2}", value[i + 1 : i + 3]):
            out.append(chr(int(value[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


def partition_path_for(
    fields: tuple[str, ...], values: tuple[str | None, ...], *, hive_style: bool, url_encode: bool
) -> str:
    """The relative partition path for one record's partition values ("" for a non-partitioned table)."""
    parts = []
    for field_name, raw in zip(fields, values, strict=True):
        value = DEFAULT_PARTITION_PATH if raw is None or raw == "" else raw
        if url_encode:
            value = escape_partition_value(value)
        parts.append(f"{field_name}={value}" if hive_style else value)
    return "/".join(parts)


def check_relative_path(path: str, *, what: str, source: str) -> str:
    """Reject a relative path that could leave the table's base path (absolute, `..`, empty segments) or that no
    file system takes (a NUL byte or another control character)."""
    if any(ord(c) < 32 or c == "\x7f" for c in path):
        raise InvalidPlanError(f"{what} {path!r} holds a control character", path=source)
    if path.startswith("/") or "://" in path or path.startswith("\\"):
        raise InvalidPlanError(f"{what} {path!r} is not relative to the table", path=source)
    if any(seg == ".." for seg in path.split("/")):
        raise InvalidPlanError(f"{what} {path!r} escapes the table's base path", path=source)
    return path
