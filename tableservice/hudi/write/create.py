"""Creating new Hudi tables (versions 6, 8 and 9) with the properties a Spark writer of that version sets."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from tableservice.errors import AlreadyExistsError, InvalidTableConfigError, UnsupportedTableError
from tableservice.hudi.table import config as tc
from tableservice.hudi.table.config import SUPPORTED_VERSIONS, TableConfig, TableType, store_table_config
from tableservice.storage import Storage, join

EVENT_TIME_STRATEGY_ID = "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
COMMIT_TIME_STRATEGY_ID = "ce9acb64-bde0-424c-9b91-f6ebba25356d"
DEFAULT_PAYLOAD = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
OVERWRITE_PAYLOAD = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"


class MergeModeName(enum.StrEnum):
    EVENT_TIME_ORDERING = "EVENT_TIME_ORDERING"
    COMMIT_TIME_ORDERING = "COMMIT_TIME_ORDERING"


@dataclass(frozen=True)
class TableSpec:
    """What a new table is made of. `schema` is the Avro record schema of the data (no meta fields)."""

    name: str
    table_type: TableType
    version: int
    schema: dict[str, Any]
    record_key_fields: tuple[str, ...]
    partition_fields: tuple[str, ...] = ()
    ordering_fields: tuple[str, ...] = ()
    merge_mode: MergeModeName = MergeModeName.EVENT_TIME_ORDERING
    database: str = "default"
    hive_style_partitioning: bool = True
    url_encode_partitions: bool = False
    timezone: str = "UTC"
    extra_properties: tuple[tuple[str, str], ...] = ()


def _keygen(spec: TableSpec) -> tuple[str, str]:
    if not spec.partition_fields:
        return "org.apache.hudi.keygen.NonpartitionedKeyGenerator", "NON_PARTITION"
    if len(spec.partition_fields) == 1 and len(spec.record_key_fields) == 1:
        return "org.apache.hudi.keygen.SimpleKeyGenerator", "SIMPLE"
    return "org.apache.hudi.keygen.ComplexKeyGenerator", "COMPLEX"


def table_properties(spec: TableSpec) -> dict[str, str]:
    if spec.version not in SUPPORTED_VERSIONS:
        raise UnsupportedTableError(f"cannot create a table of version {spec.version}", table=spec.name)
    if not spec.record_key_fields:
        raise InvalidTableConfigError("a table needs at least one record key field", table=spec.name)
    if spec.merge_mode is MergeModeName.EVENT_TIME_ORDERING and not spec.ordering_fields:
        raise InvalidTableConfigError("EVENT_TIME_ORDERING needs ordering fields", table=spec.name)
    keygen_class, keygen_type = _keygen(spec)
    event_time = spec.merge_mode is MergeModeName.EVENT_TIME_ORDERING
    props: dict[str, str] = {
        tc.NAME: spec.name,
        tc.DATABASE: spec.database,
        tc.TYPE: spec.table_type.value,
        tc.VERSION: str(spec.version),
        tc.LAYOUT_VERSION: "1" if spec.version < 8 else "2",
        tc.ARCHIVELOG_FOLDER: "archived",
        tc.RECORD_KEY_FIELDS: ",".join(spec.record_key_fields),
        tc.HIVE_STYLE: str(spec.hive_style_partitioning).lower(),
        tc.URL_ENCODE: str(spec.url_encode_partitions).lower(),
        tc.DROP_PARTITION_COLUMNS: "false",
        tc.BASE_FILE_FORMAT: "PARQUET",
        tc.TIMEZONE: spec.timezone,
        tc.CREATE_SCHEMA: json.dumps(spec.schema, separators=(",", ":")),
    }
    if spec.partition_fields:
        props[tc.PARTITION_FIELDS] = ",".join(spec.partition_fields)
    if spec.version == 6:
        props[tc.KEYGEN_CLASS] = keygen_class
        props[tc.PAYLOAD_CLASS] = DEFAULT_PAYLOAD if event_time else OVERWRITE_PAYLOAD
        if spec.ordering_fields:
            props[tc.PRECOMBINE_FIELD] = spec.ordering_fields[0]
    else:
        props[tc.INITIAL_VERSION] = str(spec.version)
        props[tc.TIMELINE_PATH] = "timeline"
        props[tc.HISTORY_PATH] = "history"
        props[tc.KEYGEN_TYPE] = keygen_type
        props[tc.MERGE_MODE] = spec.merge_mode.value
        if spec.version == 8:
            props[tc.MERGE_STRATEGY_ID] = EVENT_TIME_STRATEGY_ID if event_time else COMMIT_TIME_STRATEGY_ID
            props[tc.PAYLOAD_CLASS] = DEFAULT_PAYLOAD if event_time else OVERWRITE_PAYLOAD
            if spec.ordering_fields:
                props[tc.PRECOMBINE_FIELD] = ",".join(spec.ordering_fields)
        else:
            props[tc.TABLE_FORMAT] = "native"
            if spec.ordering_fields:
                props[tc.ORDERING_FIELDS] = ",".join(spec.ordering_fields)
    props.update(dict(spec.extra_properties))
    props[tc.CHECKSUM] = str(tc.table_checksum(spec.database, spec.name))
    return props


def create_table(storage: Storage, base_path: str, spec: TableSpec) -> TableConfig:
    """Write `.hoodie/hoodie.properties` and the timeline folders. Fails if a table already exists there."""
    props_path = join(base_path, ".hoodie", tc.PROPERTIES_FILE)
    if storage.exists(props_path):
        raise AlreadyExistsError("a Hudi table already exists", table=spec.name, path=props_path)
    config = TableConfig(table_properties(spec), path=props_path)
    for folder in (config.timeline_folder, config.history_folder, ".hoodie/.aux", ".hoodie/.temp", ".hoodie/.schema"):
        storage.mkdirs(join(base_path, folder))
    store_table_config(storage, base_path, config)
    return config
