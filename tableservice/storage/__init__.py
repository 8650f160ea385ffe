"""The one I/O boundary: local paths and `s3://` URIs through pyarrow.fs."""

from tableservice.storage.fs import (
    STALE_TEMP_AGE_MS,
    FileInfo,
    Storage,
    StorageOptions,
    is_temp_file,
    join,
    parent,
    to_uri,
)
from tableservice.storage.local_io import TEMP_PREFIX, storage_error

__all__ = [
    "STALE_TEMP_AGE_MS",
    "TEMP_PREFIX",
    "FileInfo",
    "Storage",
    "StorageOptions",
    "is_temp_file",
    "join",
    "parent",
    "storage_error",
    "to_uri",
]
