"""The `HoodieMetadataRecord` Avro schema for a new metadata table, by table version (HUDI-MDT-NOTES §3.1).

An existing metadata table is always written with the schema its own files carry (`MetadataTable.writer_schema`);
this one is for a metadata table the daemon creates. Same structure, names, defaults and Java string hints as the
schema Hudi writes (table version 8: Hudi 1.0; version 9 adds `ArrayWrapper` and `valueType`); documentation
strings are left out, so it has the same parsing canonical form.
"""

from __future__ import annotations

import json
from typing import Any

from tableservice.hudi.models.avsc_builders import NAMESPACE

JSTRING: dict[str, Any] = {"type": "string", "avro.java.string": "String"}

_WRAPPERS: list[tuple[str, Any]] = [
    ("BooleanWrapper", "boolean"),
    ("IntWrapper", "int"),
    ("LongWrapper", "long"),
    ("FloatWrapper", "float"),
    ("DoubleWrapper", "double"),
    ("BytesWrapper", "bytes"),
    ("StringWrapper", JSTRING),
    ("DateWrapper", "int"),
    ("DecimalWrapper", {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 15}),
    ("TimeMicrosWrapper", {"type": "long", "logicalType": "time-micros"}),
    ("TimestampMicrosWrapper", "long"),
    ("LocalDateWrapper", "int"),
]


def _nullable(t: Any, *, default: bool = True) -> dict[str, Any]:
    return {"type": ["null", t], "default": None} if default else {"type": ["null", t]}


def _field(name: str, spec: dict[str, Any] | Any) -> dict[str, Any]:
    if isinstance(spec, dict) and "type" in spec and set(spec) <= {"type", "default"}:
        return {"name": name, **spec}
    return {"name": name, "type": spec}


def _bounds(version: int) -> tuple[list[Any], list[Any]]:
    """(the union as first declared, the union referring to the declared names)."""
    declared: list[Any] = ["null"]
    for name, value in _WRAPPERS:
        declared.append({"type": "record", "name": name, "fields": [{"name": "value", "type": value}]})
    names: list[Any] = ["null", *[name for name, _ in _WRAPPERS]]
    if version >= 9:
        array = {
            "type": "record",
            "name": "ArrayWrapper",
            "fields": [
                {"name": "wrappedValues", "type": ["null", {"type": "array", "items": list(names)}], "default": None}
            ],
        }
        declared.append(array)
        names.append("ArrayWrapper")
    return declared, names


def metadata_record_schema(table_version: int) -> dict[str, Any]:
    """The schema as a JSON-able dict."""
    declared, names = _bounds(table_version)
    stats_fields: list[dict[str, Any]] = [
        _field("fileName", _nullable(JSTRING)),
        _field("columnName", _nullable(JSTRING)),
        {"name": "minValue", "type": declared, "default": None},
        {"name": "maxValue", "type": names, "default": None},
        _field("valueCount", _nullable("long")),
        _field("nullCount", _nullable("long")),
        _field("totalSize", _nullable("long")),
        _field("totalUncompressedSize", _nullable("long")),
        {"name": "isDeleted", "type": "boolean"},
        {"name": "isTightBound", "type": "boolean", "default": False},
    ]
    if table_version >= 9:
        value_type = {
            "type": "record",
            "name": "HoodieValueTypeInfo",
            "fields": [{"name": "typeOrdinal", "type": "int"}, _field("additionalInfo", _nullable(JSTRING))],
        }
        stats_fields.append(_field("valueType", _nullable(value_type)))
    file_info = {
        "type": "record",
        "name": "HoodieMetadataFileInfo",
        "fields": [{"name": "size", "type": "long"}, {"name": "isDeleted", "type": "boolean"}],
    }
    bloom = {
        "type": "record",
        "name": "HoodieMetadataBloomFilter",
        "fields": [
            {"name": "type", "type": JSTRING},
            {"name": "timestamp", "type": JSTRING},
            {"name": "bloomFilter", "type": "bytes"},
            {"name": "isDeleted", "type": "boolean"},
        ],
    }
    record_index = {
        "type": "record",
        "name": "HoodieRecordIndexInfo",
        "fields": [
            _field("partitionName", _nullable(JSTRING)),
            _field("fileIdHighBits", _nullable("long")),
            _field("fileIdLowBits", _nullable("long")),
            _field("fileIndex", _nullable("int")),
            _field("fileId", _nullable(JSTRING)),
            _field("instantTime", _nullable("long")),
            {"name": "fileIdEncoding", "type": "int", "default": 0},
            _field("position", _nullable("long")),
        ],
    }
    secondary = {
        "type": "record",
        "name": "HoodieSecondaryIndexInfo",
        "fields": [{"name": "isDeleted", "type": "boolean"}],
    }
    meta = [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    ]
    return {
        "type": "record",
        "name": "HoodieMetadataRecord",
        "namespace": NAMESPACE,
        "fields": [
            *[_field(m, _nullable("string")) for m in meta],
            {"name": "key", "type": JSTRING},
            {"name": "type", "type": "int"},
            _field(
                "filesystemMetadata",
                _nullable({"type": "map", "values": file_info, "avro.java.string": "String"}, default=False),
            ),
            _field("BloomFilterMetadata", _nullable(bloom)),
            _field(
                "ColumnStatsMetadata",
                _nullable({"type": "record", "name": "HoodieMetadataColumnStats", "fields": stats_fields}),
            ),
            _field("recordIndexMetadata", _nullable(record_index)),
            _field("SecondaryIndexMetadata", _nullable(secondary)),
        ],
    }


def metadata_record_schema_json(table_version: int) -> str:
    return json.dumps(metadata_record_schema(table_version), separators=(",", ":"))
