"""`hoodie.properties`: the table's configuration, read, validated and rewritten the way Hudi does."""

from __future__ import annotations

import enum
import zlib
from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType

from tableservice.errors import (
    FileMissingError,
    InvalidTableConfigError,
    TableServiceError,
    UnsupportedTableError,
)
from tableservice.hudi.table.properties import format_properties, parse_properties
from tableservice.storage import Storage, join

PROPERTIES_FILE = "hoodie.properties"
BACKUP_FILE = "hoodie.properties.backup"
META_FOLDER = ".hoodie"
SUPPORTED_VERSIONS = (6, 8, 9)

# Keys by their Hudi names.
NAME = "hoodie.table.name"
DATABASE = "hoodie.database.name"
TYPE = "hoodie.table.type"
VERSION = "hoodie.table.version"
INITIAL_VERSION = "hoodie.table.initial.version"
LAYOUT_VERSION = "hoodie.timeline.layout.version"
TIMELINE_PATH = "hoodie.timeline.path"
HISTORY_PATH = "hoodie.timeline.history.path"
ARCHIVELOG_FOLDER = "hoodie.archivelog.folder"
CHECKSUM = "hoodie.table.checksum"
RECORD_KEY_FIELDS = "hoodie.table.recordkey.fields"
PARTITION_FIELDS = "hoodie.table.partition.fields"
PRECOMBINE_FIELD = "hoodie.table.precombine.field"
ORDERING_FIELDS = "hoodie.table.ordering.fields"
KEYGEN_CLASS = "hoodie.table.keygenerator.class"
KEYGEN_TYPE = "hoodie.table.keygenerator.type"
HIVE_STYLE = "hoodie.datasource.write.hive_style_partitioning"
URL_ENCODE = "hoodie.datasource.write.partitionpath.urlencode"
DROP_PARTITION_COLUMNS = "hoodie.datasource.write.drop.partition.columns"
BASE_FILE_FORMAT = "hoodie.table.base.file.format"
LOG_FILE_FORMAT = "hoodie.table.log.file.format"
TIMEZONE = "hoodie.table.timeline.timezone"
MERGE_MODE = "hoodie.record.merge.mode"
MERGE_STRATEGY_ID = "hoodie.record.merge.strategy.id"
PAYLOAD_CLASS = "hoodie.compaction.payload.class"
METADATA_PARTITIONS = "hoodie.table.metadata.partitions"
METADATA_PARTITIONS_INFLIGHT = "hoodie.table.metadata.partitions.inflight"
CREATE_SCHEMA = "hoodie.table.create.schema"
POPULATE_META_FIELDS = "hoodie.populate.meta.fields"
BOOTSTRAP_BASE_PATH = "hoodie.bootstrap.base.path"
CDC_ENABLED = "hoodie.table.cdc.enabled"
TABLE_FORMAT = "hoodie.table.format"
PARTIAL_UPDATE_MODE = "hoodie.table.partial.update.mode"


class TableType(enum.StrEnum):
    COPY_ON_WRITE = "COPY_ON_WRITE"
    MERGE_ON_READ = "MERGE_ON_READ"


def table_checksum(database: str, name: str) -> int:
    """CRC32 of `<database>.<name>`, the value Hudi keeps in `hoodie.table.checksum`."""
    return zlib.crc32(f"{database}.{name}".encode())


def _bool(value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    return value.strip().lower() == "true"


def _fields(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    return tuple(f.strip() for f in value.split(",") if f.strip())


class TableConfig:
    """An immutable view of `hoodie.properties`; unknown keys are kept verbatim."""

    def __init__(self, properties: Mapping[str, str], *, path: str = PROPERTIES_FILE, validate: bool = True) -> None:
        self._props = MappingProxyType(dict(properties))
        self.path = path
        if validate:
            self.validate()

    # --- raw access --------------------------------------------------------------------------------

    @property
    def properties(self) -> Mapping[str, str]:
        return self._props

    def get(self, key: str, default: str | None = None) -> str | None:
        return self._props.get(key, default)

    def with_updates(self, updates: Mapping[str, str | None]) -> TableConfig:
        """A copy with keys set (or removed when the value is None); the checksum follows the names."""
        props = dict(self._props)
        for k, v in updates.items():
            if v is None:
                props.pop(k, None)
            else:
                props[k] = v
        if NAME in props:
            props[CHECKSUM] = str(table_checksum(props.get(DATABASE, ""), props[NAME]))
        return TableConfig(props, path=self.path)

    # --- validation --------------------------------------------------------------------------------

    def validate(self) -> None:
        for key in (NAME, TYPE, VERSION):
            if not self._props.get(key):
                raise InvalidTableConfigError(f"required key {key} is missing", path=self.path)
        raw_version = self._props[VERSION]
        try:
            version = int(raw_version)
        except ValueError as e:
            raise InvalidTableConfigError(f"{VERSION}={raw_version!r} is not a number", path=self.path) from e
        if version not in SUPPORTED_VERSIONS:
            raise UnsupportedTableError(
                f"{VERSION}={version} is not supported (supported: {', '.join(map(str, SUPPORTED_VERSIONS))})",
                table=self._props.get(NAME),
                path=self.path,
            )
        raw_type = self._props[TYPE]
        if raw_type not in TableType.__members__:
            raise InvalidTableConfigError(f"{TYPE}={raw_type!r} is not COPY_ON_WRITE or MERGE_ON_READ", path=self.path)
        layout = self._props.get(LAYOUT_VERSION)
        expected_layout = 1 if version < 8 else 2
        if layout is not None and layout.strip() != str(expected_layout):
            raise InvalidTableConfigError(
                f"{LAYOUT_VERSION}={layout!r} does not match {VERSION}={version} (expected {expected_layout})",
                table=self.name,
                path=self.path,
            )
        checksum = self._props.get(CHECKSUM)
        if checksum is not None:
            expected = table_checksum(self.database, self.name)
            if checksum.strip() != str(expected):
                raise InvalidTableConfigError(
                    f"{CHECKSUM}={checksum!r} does not match CRC32 of '{self.database}.{self.name}' ({expected})",
                    table=self.name,
                    path=self.path,
                )

    # --- typed accessors ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._props[NAME]

    @property
    def database(self) -> str:
        return self._props.get(DATABASE, "")

    @property
    def table_type(self) -> TableType:
        return TableType(self._props[TYPE])

    @property
    def is_mor(self) -> bool:
        return self.table_type is TableType.MERGE_ON_READ

    @property
    def version(self) -> int:
        return int(self._props[VERSION])

    @property
    def layout_version(self) -> int:
        return 1 if self.version < 8 else 2

    @property
    def timeline_folder(self) -> str:
        """Relative to the base path: `.hoodie` (layout 1) or `.hoodie/timeline` (layout 2)."""
        if self.layout_version == 1:
            return META_FOLDER
        return f"{META_FOLDER}/{self._props.get(TIMELINE_PATH) or 'timeline'}"

    @property
    def history_folder(self) -> str:
        """Where archived instants live: `.hoodie/archived` (v6) or `.hoodie/timeline/history` (v8+)."""
        if self.layout_version == 1:
            return f"{META_FOLDER}/{self._props.get(ARCHIVELOG_FOLDER) or 'archived'}"
        return f"{self.timeline_folder}/{self._props.get(HISTORY_PATH) or 'history'}"

    @property
    def record_key_fields(self) -> tuple[str, ...]:
        return _fields(self._props.get(RECORD_KEY_FIELDS))

    @property
    def partition_fields(self) -> tuple[str, ...]:
        """Partition field names, without the `:<type>` suffix custom key generators add."""
        return tuple(f.split(":", 1)[0] for f in _fields(self._props.get(PARTITION_FIELDS)))

    @property
    def is_partitioned(self) -> bool:
        return bool(self.partition_fields)

    @property
    def ordering_fields(self) -> tuple[str, ...]:
        """v9 `hoodie.table.ordering.fields`, else the precombine field."""
        return _fields(self._props.get(ORDERING_FIELDS) or self._props.get(PRECOMBINE_FIELD))

    @property
    def hive_style_partitioning(self) -> bool:
        return _bool(self._props.get(HIVE_STYLE), False)

    @property
    def url_encode_partitions(self) -> bool:
        return _bool(self._props.get(URL_ENCODE), False)

    @property
    def drop_partition_columns(self) -> bool:
        return _bool(self._props.get(DROP_PARTITION_COLUMNS), False)

    @property
    def populate_meta_fields(self) -> bool:
        return _bool(self._props.get(POPULATE_META_FIELDS), True)

    @property
    def base_file_format(self) -> str:
        return (self._props.get(BASE_FILE_FORMAT) or "PARQUET").upper()

    @property
    def base_file_extension(self) -> str:
        return {"PARQUET": ".parquet", "ORC": ".orc", "HFILE": ".hfile"}.get(self.base_file_format, ".parquet")

    @property
    def timezone_name(self) -> str:
        return self._props.get(TIMEZONE) or "LOCAL"

    @property
    def metadata_partitions(self) -> tuple[str, ...]:
        return _fields(self._props.get(METADATA_PARTITIONS))

    @property
    def metadata_partitions_inflight(self) -> tuple[str, ...]:
        """Metadata partitions being built by an indexing action: writers send them records, readers skip them."""
        return _fields(self._props.get(METADATA_PARTITIONS_INFLIGHT))

    @property
    def has_metadata_table(self) -> bool:
        """True when a metadata table must be kept in step with every commit."""
        return bool(self.metadata_partitions) or bool(_fields(self._props.get(METADATA_PARTITIONS_INFLIGHT)))

    @property
    def create_schema(self) -> str | None:
        return self._props.get(CREATE_SCHEMA)

    @property
    def bootstrap_base_path(self) -> str | None:
        return self._props.get(BOOTSTRAP_BASE_PATH)

    # --- serialisation -----------------------------------------------------------------------------

    def to_text(self, now: datetime | None = None) -> str:
        moment = now if now is not None else datetime.now(UTC)
        stamp = moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
        return format_properties(self._props, [f"Updated at {stamp}", moment.strftime("%a %b %d %H:%M:%S UTC %Y")])


def parse_table_config(text: bytes, *, path: str) -> TableConfig:
    try:
        decoded = text.decode("latin-1")
    except UnicodeDecodeError as e:  # pragma: no cover - latin-1 decodes every byte
        raise InvalidTableConfigError(f"not a properties file: {e}", path=path) from e
    if "\x00" in decoded:
        raise InvalidTableConfigError("not a properties file: contains NUL bytes", path=path)
    try:
        properties = parse_properties(decoded)
    except UnicodeError as e:  # a \\u escape naming half of a surrogate pair
        raise InvalidTableConfigError(f"not a properties file: a \\u escape does not decode: {e}", path=path) from e
    return TableConfig(properties, path=path)


def load_table_config(storage: Storage, base_path: str) -> TableConfig:
    """Read `hoodie.properties`, falling back to the backup Hudi leaves while rewriting it."""
    meta = join(base_path, META_FOLDER)
    main = join(meta, PROPERTIES_FILE)
    backup = join(meta, BACKUP_FILE)
    try:
        return parse_table_config(storage.read_bytes(main), path=main)
    except (FileMissingError, InvalidTableConfigError) as first:
        if not storage.exists(backup):
            if isinstance(first, FileMissingError):
                if not storage.exists(base_path):
                    raise FileMissingError("no table here: the folder does not exist", path=base_path) from first
                raise InvalidTableConfigError(
                    "not a Hudi table: the folder exists but holds no .hoodie/hoodie.properties", path=main
                ) from first
            raise
        try:
            return parse_table_config(storage.read_bytes(backup), path=backup)
        except TableServiceError:
            raise first from None


def store_table_config(storage: Storage, base_path: str, config: TableConfig) -> None:
    """Rewrite `hoodie.properties` with Hudi's protocol: backup, replace, drop the backup.

    A crash at any step leaves either the old file, the backup (read by `load_table_config`), or the new file.
    """
    meta = join(base_path, META_FOLDER)
    main = join(meta, PROPERTIES_FILE)
    backup = join(meta, BACKUP_FILE)
    if storage.exists(main):
        storage.write_bytes(backup, storage.read_bytes(main))
    storage.write_bytes(main, config.to_text().encode("latin-1"))
    storage.delete(backup)
