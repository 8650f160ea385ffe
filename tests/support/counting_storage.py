"""A Storage that records every path it reads or lists, to check which files a step touches."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from tableservice.storage import FileInfo, Storage, StorageOptions


class CountingStorage(Storage):
    """Records (operation, location) of every read, open, info, existence check and listing, in order."""

    def __init__(self, options: StorageOptions | None = None) -> None:
        super().__init__(options)
        self.calls: list[tuple[str, str]] = []

    def touched(self, fragment: str) -> list[tuple[str, str]]:
        """The calls whose location contains `fragment`."""
        return [c for c in self.calls if fragment in c[1]]

    def read_bytes(self, location: str) -> bytes:
        self.calls.append(("read", location))
        return super().read_bytes(location)

    def open_input_file(self, location: str, size: int | None = None) -> pa.NativeFile:
        self.calls.append(("open", location))
        return super().open_input_file(location, size)

    def info(self, location: str) -> FileInfo | None:
        self.calls.append(("info", location))
        return super().info(location)

    def list(self, location: str, *, recursive: bool = False, temp_files: bool = False) -> list[FileInfo]:
        self.calls.append(("list", location))
        return super().list(location, recursive=recursive, temp_files=temp_files)

    def walk_files(self, location: str) -> Iterator[FileInfo]:
        self.calls.append(("walk", location))
        return super().walk_files(location)
