"""The one I/O boundary: local paths and `s3://` URIs through pyarrow.fs."""

from tableservice.storage.fs import STALE_TEMP_AGE_MS, Storage
from tableservice.storage.local_io import TEMP_PREFIX, storage_error
from tableservice.storage.locations import FileInfo, StorageOptions, is_temp_file, join, parent, to_uri

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
