"""Restore plan (`HoodieRestorePlan`, in `<t>.restore.requested`) and restore metadata (`HoodieRestoreMetadata`, in
the completed `<t>.restore`): one `HoodieRollbackMetadata` per rolled-back instant."""

from __future__ import annotations

from typing import ClassVar

from tableservice.hudi.models.base import AvroInt, AvroLong, HudiModel
from tableservice.hudi.models.rollback import HoodieInstantInfo, HoodieRollbackMetadata


class HoodieRestorePlan(HudiModel):
    """The instants a restore rolls back, in the order it rolls them back (pending clustering first, then newest
    first), and the savepoint it restores to (plan version 2; version 1 plans have none)."""

    avro_name: ClassVar[str] = "HoodieRestorePlan"

    instants_to_rollback: tuple[HoodieInstantInfo, ...] = ()
    version: AvroInt | None = 2
    savepoint_to_restore_timestamp: str | None = None


class HoodieRestoreMetadata(HudiModel):
    avro_name: ClassVar[str] = "HoodieRestoreMetadata"

    start_restore_time: str
    time_taken_in_millis: AvroLong
    instants_to_rollback: tuple[str, ...]
    hoodie_restore_metadata: dict[str, tuple[HoodieRollbackMetadata | None, ...]]
    version: AvroInt | None = 1
    restore_instant_info: tuple[HoodieInstantInfo, ...] = ()
    extra_metadata: dict[str, str] | None = None

    def rolled_back(self) -> tuple[str, ...]:
        """The requested times of the instants the restore rolled back."""
        if self.restore_instant_info:
            return tuple(i.commit_time for i in self.restore_instant_info)
        return self.instants_to_rollback
