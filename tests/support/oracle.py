"""hudi-rs (the PyPI package `hudi` 0.5.0): the independent reader every test compares with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

SliceKey = tuple[str, str, str, tuple[str, ...]]


def _options(
    as_of: str | None = None,
    read_optimized: bool = False,
    columns: list[str] | None = None,
    start: str | None = None,
    end: str | None = None,
) -> Any:
    from hudi import HudiQueryType, HudiReadOptions

    opts = HudiReadOptions(projection=columns)
    if as_of is not None:
        opts = opts.with_as_of_timestamp(as_of)
    if read_optimized:
        opts = opts.with_hudi_option("hoodie.read.use.read_optimized.mode", "true")
    if start is not None:
        opts = opts.with_query_type(HudiQueryType.Incremental).with_start_timestamp(start)
        if end is not None:
            opts = opts.with_end_timestamp(end)
    return opts


def _table(path: str, storage_options: dict[str, str] | None = None) -> Any:
    from hudi import HudiTableBuilder

    builder = HudiTableBuilder.from_base_uri(path)
    if storage_options:
        builder = builder.with_storage_options(storage_options)
    return builder.build()


def hudi_slices(path: str, as_of: str | None = None) -> set[SliceKey]:
    slices = _table(path).get_file_slices(_options(as_of=as_of))
    return {(s.partition_path, s.file_id, s.base_file_name, tuple(sorted(s.log_file_names))) for s in slices}


def listing_view(path: str | Path, dest: Path) -> Path:
    """A view of the table that hudi-rs reads by listing storage: symbolic links to the table's entries, and a
    `.hoodie` whose `hoodie.properties` lists no metadata partitions (hudi-rs lets `hoodie.properties` override
    its options, so this is the only way to make it list storage for a table with a metadata table)."""
    source = Path(path)
    dest.mkdir(parents=True)
    for entry in source.iterdir():
        if entry.name != ".hoodie":
            (dest / entry.name).symlink_to(entry)
    meta = dest / ".hoodie"
    meta.mkdir()
    for entry in (source / ".hoodie").iterdir():
        if entry.name != "hoodie.properties":
            (meta / entry.name).symlink_to(entry)
    lines = (source / ".hoodie" / "hoodie.properties").read_text().splitlines()
    kept = [line for line in lines if not line.startswith("hoodie.table.metadata.partitions")]
    (meta / "hoodie.properties").write_text("\n".join([*kept, "hoodie.table.metadata.partitions="]) + "\n")
    return dest


def hudi_read(
    path: str,
    *,
    as_of: str | None = None,
    read_optimized: bool = False,
    columns: list[str] | None = None,
    start: str | None = None,
    end: str | None = None,
    storage_options: dict[str, str] | None = None,
) -> pa.Table:
    """hudi-rs's read, rows sorted by record key (and partition path); `storage_options` are hudi-rs's (S3:
    aws_endpoint_url, aws_allow_http, aws_region, credentials)."""
    table = _table(path, storage_options)
    opts = _options(as_of, read_optimized, columns, start, end)
    batches = table.read(opts)
    schema = table.get_schema_with_meta_fields()
    result = pa.Table.from_batches(batches) if batches else schema.empty_table()
    return sort_rows(result)


SORT_COLUMNS = (
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_file_name",
)


def sort_rows(table: pa.Table) -> pa.Table:
    keys = [c for c in SORT_COLUMNS if c in table.column_names]
    if not keys:
        keys = table.column_names[:1]
    return table.sort_by([(k, "ascending") for k in keys])


def assert_same_rows(ours: pa.Table, theirs: pa.Table, what: str = "") -> None:
    """Value-for-value equality after sorting both by the meta columns; column names and order must match."""
    assert ours.column_names == theirs.column_names, f"{what}: columns {ours.column_names} != {theirs.column_names}"
    a, b = sort_rows(ours), sort_rows(theirs)
    assert a.num_rows == b.num_rows, f"{what}: {a.num_rows} rows != {b.num_rows}"
    for name in b.column_names:
        x, y = a.column(name), b.column(name)
        assert x.type == y.type, f"{what}: column {name} is {x.type}, hudi-rs reads {y.type}"
        assert x.to_pylist() == y.to_pylist(), f"{what}: column {name} differs"
