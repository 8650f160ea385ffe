"""Local whole-file writes through a fsynced temp file beside the target, and the StorageErrors naming the file and
the OS's reason."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile

from tableservice.errors import StorageError, StorageFullError

# Files we create are readable by other users (Spark executors often run as another user); temp files from
# mkstemp would otherwise be 0600.
FILE_MODE = 0o644
# Temp files of whole-file writes; listings leave them out.
TEMP_PREFIX = ".tmp-"
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def write_temp(path: str, data: bytes, location: str) -> str:
    """Write `data` in full to a new temp file beside `path` and fsync it; returns the temp file's path. On any
    failure (including BaseExceptions such as KeyboardInterrupt) the temp file is removed before the error leaves;
    OSErrors become StorageErrors naming `location`."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=TEMP_PREFIX)
    except OSError as e:
        raise storage_error("write failed", location, e) from e
    try:
        try:
            os.fchmod(fd, FILE_MODE)
            view = memoryview(data)
            while view:  # os.write may write less than asked (a signal, a nearly full device)
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException as e:
        unlink_quietly(tmp)
        if isinstance(e, OSError):
            raise storage_error("write failed", location, e) from e
        raise
    return tmp


def _os_reason(e: OSError) -> str:
    """The OS's reason for a failure, without the file names it carries: `No space left on device (ENOSPC)`."""
    code = e.errno
    if code is not None and code in errno.errorcode:
        return f"{os.strerror(code)} ({errno.errorcode[code]})"
    return str(e)


def storage_error(what: str, location: str, e: OSError) -> StorageError:
    """A StorageError naming `location` and the OS's reason; StorageFullError for a full device or quota."""
    cls = StorageFullError if e.errno in _FULL else StorageError
    return cls(f"{what}: {_os_reason(e)}", path=location)


def unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
