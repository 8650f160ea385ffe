"""Secondary-index records of a writer's commit (HUDI-MDT-NOTES §3.2, §6.2).

An entry is `<escaped value>$<escaped record key>` (`keys.secondary_index_key`). For every key a commit wrote,
the entry for its new value is added and the entries for its other values removed; every entry of a key the
commit removed (delete blocks, keys a rewritten base file no longer holds, replaced file groups) is removed.
Which keys a commit touched comes from the record-index updates of the same commit (`record_index.write_updates`),
their new values from the files it wrote; their old entries from the secondary index itself (one read of the
partition: an entry holds its record key). Compaction and clustering move records without changing values:
they send nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from tableservice.errors import InvalidTableConfigError, TableServiceError
from tableservice.hudi.file_group.base_file_reader import iter_base_file
from tableservice.hudi.file_group.log_format import iter_log_records
from tableservice.hudi.metadata.column_stats import read_index_definitions
from tableservice.hudi.metadata.delta_commit import MetadataRecord
from tableservice.hudi.metadata.keys import secondary_index_key, secondary_record_key
from tableservice.hudi.metadata.reader import MetadataTable
from tableservice.hudi.metadata.record_index import KEY, IndexUpdate, secondary_texts
from tableservice.hudi.metadata.records import secondary_index_record
from tableservice.hudi.table.fs_view import partition_location
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.storage import join


def secondary_column(table: HudiTable, partition: str) -> str:
    """The column a secondary index indexes, from its definition in `.hoodie/.index_defs/index.json`."""
    definition = (read_index_definitions(table.storage, table.base_path) or {}).get(partition)
    fields = definition.get("sourceFields") if definition else None
    if not fields or len(fields) != 1:
        raise InvalidTableConfigError(
            f"{partition} needs a definition with one source field in .hoodie/.index_defs/index.json", table=table.label
        )
    return str(fields[0])


def written_values(table: HudiTable, files: Iterable[tuple[str, str]], column: str) -> dict[str, str | None]:
    """Record key -> the column's value (as the index holds it) in the files a commit wrote (partition, name)."""
    out: dict[str, str | None] = {}
    for partition, name in files:
        location = join(partition_location(table.base_path, partition), name)
        try:
            if not name.startswith("."):
                for batch in iter_base_file(table.storage, location, [KEY, column]):
                    keys, texts = batch.column(0).to_pylist(), secondary_texts(batch.column(1))
                    out.update((k, v) for k, v in zip(keys, texts, strict=True) if k)
                continue
            for is_delete, rows in iter_log_records(table.storage, location, table=table.label):
                if not is_delete and KEY in rows.column_names and column in rows.column_names:
                    keys, texts = rows.column(KEY).to_pylist(), secondary_texts(rows.column(column))
                    out.update((k, v) for k, v in zip(keys, texts, strict=True) if k)
        except TableServiceError as e:
            raise e.with_context(table=table.label, path=location) from e
    return out


def secondary_updates(
    mdt: MetadataTable,
    partitions: Sequence[str],
    index_updates: Sequence[IndexUpdate],
    written: Sequence[tuple[str, str]],
) -> list[MetadataRecord]:
    """The secondary-index records of a writer's commit whose record-index updates are `index_updates` and which
    wrote the files `written` (partition, name)."""
    touched = {k for k, _ in index_updates}
    if not touched:
        return []
    removed = {k for k, v in index_updates if v is None}
    out: list[MetadataRecord] = []
    live = secondary_index_record()
    for partition in partitions:
        values = written_values(mdt.data, written, secondary_column(mdt.data, partition))
        existing: dict[str, set[str]] = defaultdict(set)
        for entry in mdt.read_partition(partition):
            key = secondary_record_key(entry)
            if key in touched:
                existing[key].add(entry)
        for key in sorted(touched):
            old = existing.get(key, set())
            if key in removed or key not in values:
                new: set[str] = set() if key in removed else old
            else:
                new = {secondary_index_key(values[key], key)}
            out.extend(MetadataRecord(partition, e, None) for e in sorted(old - new))
            out.extend(MetadataRecord(partition, e, dict(live)) for e in sorted(new - old))
    return out
