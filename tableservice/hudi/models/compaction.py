"""Compaction plan (`HoodieCompactionPlan`, the content of `<t>.compaction.requested` and
`<t>.logcompaction.requested`)."""

from __future__ import annotations

from typing import ClassVar

from tableservice.hudi.models.base import AvroInt, HudiModel


class HoodieCompactionOperation(HudiModel):
    """One file slice to compact. `dataFilePath` and `deltaFilePaths` are file names; `baseInstantTime` is the
    slice's key. `baseInstantTime` and `fileId` have no default in Hudi's schema, so they are required here."""

    avro_name: ClassVar[str] = "HoodieCompactionOperation"

    base_instant_time: str | None
    delta_file_paths: tuple[str, ...] | None = None
    data_file_path: str | None = None
    file_id: str | None
    partition_path: str | None = None
    metrics: dict[str, float] | None = None
    bootstrap_file_path: str | None = None


class HoodieCompactionStrategy(HudiModel):
    avro_name: ClassVar[str] = "HoodieCompactionStrategy"

    compactor_class_name: str | None = None
    strategy_params: dict[str, str] | None = None
    version: AvroInt | None = 1


class HoodieCompactionPlan(HudiModel):
    avro_name: ClassVar[str] = "HoodieCompactionPlan"

    operations: tuple[HoodieCompactionOperation, ...] | None = None
    extra_metadata: dict[str, str] | None = None
    version: AvroInt | None = 1
    strategy: HoodieCompactionStrategy | None = None
    preserve_hoodie_metadata: bool | None = False
    missing_schedule_partitions: tuple[str, ...] | None = None

    def file_group_ids(self) -> set[tuple[str, str]]:
        """(partition path, file id) of every operation."""
        return {(op.partition_path or "", op.file_id or "") for op in self.operations or ()}
