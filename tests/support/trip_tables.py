"""Empty trip tables (the workload's schema, keyed by `uuid`, partitioned by `city`, ordered by `ts`) for tests."""

from __future__ import annotations

from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.schema import avro_schema_from_arrow
from tableservice.hudi.write.create import TableSpec, create_table
from tableservice.hudi.write.workload import TRIP_SCHEMA
from tableservice.storage import Storage


def create_trip_table(
    path: str,
    version: int,
    table_type: TableType,
    *,
    name: str = "t",
    storage: Storage | None = None,
    partition_fields: tuple[str, ...] = ("city",),
) -> str:
    create_table(
        storage if storage is not None else Storage(),
        path,
        TableSpec(
            name=name,
            table_type=table_type,
            version=version,
            schema=avro_schema_from_arrow(TRIP_SCHEMA, f"{name}_record", f"hoodie.{name}"),
            record_key_fields=("uuid",),
            partition_fields=partition_fields,
            ordering_fields=("ts",),
        ),
    )
    return path
