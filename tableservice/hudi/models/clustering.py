"""Clustering plans and requested replace metadata (`HoodieRequestedReplaceMetadata`, the content of
`<t>.replacecommit.requested` and, in table versions 8 and 9, `<t>.clustering.requested`)."""

from __future__ import annotations

from typing import ClassVar

from tableservice.hudi.models.base import AvroInt, HudiModel


class HoodieSliceInfo(HudiModel):
    """One input file slice of a clustering group (absolute paths). `fileId` has no default in Hudi's schema."""

    avro_name: ClassVar[str] = "HoodieSliceInfo"

    data_file_path: str | None = None
    delta_file_paths: tuple[str, ...] | None = None
    file_id: str | None
    partition_path: str | None = None
    bootstrap_file_path: str | None = None
    version: AvroInt | None = 1


class HoodieClusteringGroup(HudiModel):
    avro_name: ClassVar[str] = "HoodieClusteringGroup"

    slices: tuple[HoodieSliceInfo, ...] | None = None
    metrics: dict[str, float] | None = None
    num_output_file_groups: AvroInt | None = 1
    extra_metadata: dict[str, str] | None = None
    version: AvroInt | None = 1


class HoodieClusteringStrategy(HudiModel):
    avro_name: ClassVar[str] = "HoodieClusteringStrategy"

    strategy_class_name: str | None = None
    strategy_params: dict[str, str] | None = None
    version: AvroInt | None = 1


class HoodieClusteringPlan(HudiModel):
    avro_name: ClassVar[str] = "HoodieClusteringPlan"

    input_groups: tuple[HoodieClusteringGroup, ...] | None = None
    strategy: HoodieClusteringStrategy | None = None
    extra_metadata: dict[str, str] | None = None
    version: AvroInt | None = 1
    preserve_hoodie_metadata: bool | None = None
    missing_schedule_partitions: tuple[str, ...] | None = None

    def file_group_ids(self) -> set[tuple[str, str]]:
        """(partition path, file id) of every input slice."""
        return {
            (s.partition_path or "", s.file_id or "") for group in self.input_groups or () for s in group.slices or ()
        }


class HoodieRequestedReplaceMetadata(HudiModel):
    """A requested replace commit. Clustering sets `operationType` CLUSTER and a `clusteringPlan`; an insert
    overwrite's requested file holds a record whose fields are all null (seen in real v6 and v9 tables)."""

    avro_name: ClassVar[str] = "HoodieRequestedReplaceMetadata"

    operation_type: str | None = None
    clustering_plan: HoodieClusteringPlan | None = None
    extra_metadata: dict[str, str] | None = None
    version: AvroInt | None = 1

    @property
    def is_clustering(self) -> bool:
        return self.clustering_plan is not None and self.operation_type in ("CLUSTER", None)
