"""Async indexing plan (`HoodieIndexPlan`, in `<t>.indexing.requested`) and its commit metadata
(`HoodieIndexCommitMetadata`, in the completed `<t>.indexing`)."""

from __future__ import annotations

from typing import ClassVar

from tableservice.hudi.models.base import AvroInt, HudiModel


class HoodieIndexPartitionInfo(HudiModel):
    avro_name: ClassVar[str] = "HoodieIndexPartitionInfo"

    version: AvroInt | None = 1
    metadata_partition_path: str | None = None
    index_upto_instant: str | None = None
    extra_metadata: dict[str, str] | None = None


class HoodieIndexPlan(HudiModel):
    avro_name: ClassVar[str] = "HoodieIndexPlan"

    version: AvroInt | None = 1
    index_partition_infos: tuple[HoodieIndexPartitionInfo, ...] | None = None


class HoodieIndexCommitMetadata(HudiModel):
    avro_name: ClassVar[str] = "HoodieIndexCommitMetadata"

    version: AvroInt | None = 1
    operation_type: str | None = None
    index_partition_infos: tuple[HoodieIndexPartitionInfo, ...] | None = None
