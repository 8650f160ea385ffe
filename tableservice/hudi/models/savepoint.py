"""Savepoint metadata (`HoodieSavepointMetadata`, in the completed `<t>.savepoint`)."""

from __future__ import annotations

from typing import ClassVar

from tableservice.hudi.models.base import AvroInt, AvroLong, HudiModel


class HoodieSavepointPartitionMetadata(HudiModel):
    avro_name: ClassVar[str] = "HoodieSavepointPartitionMetadata"

    partition_path: str
    savepoint_data_file: tuple[str, ...]


class HoodieSavepointMetadata(HudiModel):
    avro_name: ClassVar[str] = "HoodieSavepointMetadata"

    savepointed_by: str
    savepointed_at: AvroLong
    comments: str
    partition_metadata: dict[str, HoodieSavepointPartitionMetadata]
    version: AvroInt | None = 1

    def savepointed_files(self) -> set[str]:
        """Every data file name the savepoint protects."""
        return {f for p in self.partition_metadata.values() for f in p.savepoint_data_file}
