"""The one I/O boundary: local paths and `s3://` URIs through pyarrow.fs."""

from tableservice.storage.fs import FileInfo, Storage, StorageOptions, join, parent, to_uri

__all__ = ["FileInfo", "Storage", "StorageOptions", "join", "parent", "to_uri"]
