"""Low-cardinality string columns read and written as Arrow dictionaries: which columns a group chooses, and that a
base file written from dictionaries is the file written from the plain columns (rows, Parquet schema, statistics,
Hudi footer); a clustering group of base files takes that path and keeps its rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tableservice.hudi.action import cluster
from tableservice.hudi.action.cluster import run_clustering_task
from tableservice.hudi.action.compact import slice_at
from tableservice.hudi.action.tasks import ClusteringInput, ClusteringLayout, clustering_tasks
from tableservice.hudi.action.warm import _sample
from tableservice.hudi.file_group.base_file import write_base_file
from tableservice.hudi.file_group.dictionary_read import DictionaryColumns, low_cardinality_columns
from tableservice.hudi.file_group.merge import merge_config_from_properties
from tableservice.hudi.file_group.reader import BlockFilter, FileGroupReader
from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.schema import add_meta_fields, arrow_schema_from_avro, avro_schema_from_arrow
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.storage import Storage
from tests.support.oracle import hudi_read
from tests.support.trip_tables import create_trip_table

CANDIDATES = ["_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path"]


def test_the_low_cardinality_columns_of_the_first_file_are_chosen(tmp_path: Path) -> None:
    table, avro = _sample()  # 64 rows: one commit time, one partition path, unique keys and sequence numbers
    encoded, plain = str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")
    write_base_file(Storage(), encoded, table, avro_schema=avro)
    write_base_file(Storage(), plain, table, avro_schema=avro, dictionary=False)
    assert low_cardinality_columns(pq.read_metadata(encoded), CANDIDATES) == (
        "_hoodie_commit_time",
        "_hoodie_partition_path",
    )
    assert low_cardinality_columns(pq.read_metadata(plain), CANDIDATES) == ()  # no dictionary pages
    chooser = DictionaryColumns(CANDIDATES)
    assert chooser.choose(pq.read_metadata(encoded)) == ("_hoodie_commit_time", "_hoodie_partition_path")
    assert chooser.choose(pq.read_metadata(plain)) == ("_hoodie_commit_time", "_hoodie_partition_path")  # fixed
    schema = chooser.schema(table.schema)
    assert schema.field("_hoodie_commit_time").type == pa.dictionary(pa.int32(), pa.string())
    assert schema.field("_hoodie_commit_seqno").type == pa.string()


def _footer(path: str) -> tuple[str, dict[Any, Any], list[list[tuple[Any, ...]]]]:
    md = pq.read_metadata(path)
    stats = [
        [
            (c.path_in_schema, c.statistics.min, c.statistics.max, c.statistics.null_count, c.num_values)
            for c in (md.row_group(g).column(i) for i in range(md.num_columns))
        ]
        for g in range(md.num_row_groups)
    ]
    return str(md.schema).split("\n", 1)[1], dict(md.metadata), stats  # the schema without its object address


def test_a_file_written_from_dictionaries_is_the_file_written_from_strings(tmp_path: Path) -> None:
    table, _ = _sample()
    n = table.num_rows
    cities = ["paris", "lima", "oslo"]
    table = table.append_column("city", pa.array([cities[i % 3] for i in range(n)], pa.string()))
    avro = add_meta_fields(
        avro_schema_from_arrow(table.drop_columns([*CANDIDATES, "_hoodie_file_name"]).schema, "r", "h")
    )
    # Dictionaries as a group's read gives them: one per input file, with values the rows of a file do not use.
    half = n // 2
    unused = pa.array(["aaa", "zzz"])
    parts = []
    for part in (table.slice(0, half), table.slice(half)):
        columns = []
        for name in part.column_names:
            column = part.column(name).combine_chunks()
            if name in ("city", "_hoodie_commit_time"):
                values = pa.concat_arrays([unused, column.unique()])
                indices = pa.compute.index_in(column, value_set=values).cast(pa.int32())
                column = pa.DictionaryArray.from_arrays(indices, values)
            columns.append(column)
        parts.append(pa.table(columns, names=part.column_names))
    with_dictionaries = pa.concat_tables(parts).take(pa.array(range(n - 1, -1, -1)))
    assert with_dictionaries.column("city").type == pa.dictionary(pa.int32(), pa.string())
    plain, encoded = str(tmp_path / "plain.parquet"), str(tmp_path / "dict.parquet")
    expected = table.take(pa.array(range(n - 1, -1, -1)))
    a = write_base_file(Storage(), plain, expected, avro_schema=avro, compression="snappy", file_name="f.parquet")
    b = write_base_file(
        Storage(),
        encoded,
        with_dictionaries,
        avro_schema=avro,
        compression="snappy",
        file_name="f.parquet",
        dictionary_columns=("city", "_hoodie_commit_time"),
    )
    assert (a.min_record_key, a.max_record_key, a.num_rows) == (b.min_record_key, b.max_record_key, b.num_rows)
    assert a.footer_metadata == b.footer_metadata  # Avro schema, bloom filter, min/max record keys
    assert _footer(plain) == _footer(encoded)  # Parquet schema, statistics over the values used
    assert pq.read_table(encoded).to_pylist() == pq.read_table(plain).to_pylist()
    assert pq.read_table(encoded).column("city").to_pylist()[:3] == [cities[(n - 1 - i) % 3] for i in range(3)]


def _base_files_table(root: Path) -> str:
    path = str(root / "t")
    create_trip_table(path, 9, TableType.COPY_ON_WRITE, name="dict_cluster", partition_fields=())
    rows = next(iter(Workload(1200, 1, partitions=0, seed=3).steps())).records
    WriteClient(Storage(), path, options=WriteOptions(max_file_records=300, compression="snappy")).insert(rows)
    return path


def test_a_group_of_base_files_reads_through_dictionaries_and_keeps_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _base_files_table(tmp_path)
    before = hudi_read(path)
    table = HudiTable.open(Storage(), path)
    timeline = table.timeline()
    slices = table.file_system_view(timeline=timeline).latest_slices()
    assert len(slices) == 4 and not any(s.log_files for s in slices)
    (task,) = clustering_tasks(
        table,
        timeline,
        "29990101000000000",
        [ClusteringInput.of(0, "", slices, output_groups=2)],
        ClusteringLayout(target_file_bytes=1 << 30, sort_columns=("fare",)),
        compression="snappy",
    )
    chosen: list[DictionaryColumns | None] = []
    choose = cluster._dictionary_columns

    def recording(*args: object) -> DictionaryColumns | None:
        found = choose(*args)  # type: ignore[arg-type]
        chosen.append(found)
        return found

    monkeypatch.setattr(cluster, "_dictionary_columns", recording)
    stats = run_clustering_task(Storage(), task)
    (dictionaries,) = chosen
    assert dictionaries is not None
    assert set(dictionaries.chosen or ()) >= {"_hoodie_commit_time", "_hoodie_partition_path", "city"}
    assert "_hoodie_record_key" not in (dictionaries.chosen or ()) and "fare" not in dictionaries.candidates
    written = [pq.read_table(str(Path(path) / (s.path or ""))) for s in stats]
    assert [t.column("city").type for t in written] == [pa.string(), pa.string()]
    for t in written:
        fares = t.column("fare").to_pylist()
        assert fares == sorted(fares)
    names = [n for n in before.column_names if n != "_hoodie_file_name"]
    after = pa.concat_tables(written).select(names).sort_by("_hoodie_record_key")
    assert after.to_pylist() == before.select(names).sort_by("_hoodie_record_key").to_pylist()


def test_a_file_without_a_chosen_column_reads_it_as_null_dictionaries(tmp_path: Path) -> None:
    table, avro = _sample()
    n = table.num_rows
    with_city = table.append_column("city", pa.array(["lima"] * n, pa.string()))
    new_avro = add_meta_fields(
        avro_schema_from_arrow(with_city.drop_columns([*CANDIDATES, "_hoodie_file_name"]).schema, "r", "h")
    )
    first, second = (
        str(tmp_path / "f1-0_0-0-0_20240101000000000.parquet"),
        str(tmp_path / "f2-0_0-0-0_20240101000000000.parquet"),
    )
    write_base_file(Storage(), first, with_city, avro_schema=new_avro)
    write_base_file(Storage(), second, table, avro_schema=avro)  # an older file: no city
    reader = FileGroupReader(
        Storage(),
        table_name="t",
        merge_config=merge_config_from_properties({}, 9),
        schema=arrow_schema_from_avro(new_avro),
        block_filter=BlockFilter(9, frozenset(), None),
    )
    dictionaries = DictionaryColumns(["_hoodie_commit_time", "city"])
    parts = [
        t
        for fid, location in (("f1-0", first), ("f2-0", second))
        for t in reader.read_slice(slice_at(Storage(), "", fid, "20240101000000000", location, ()), None, dictionaries)
    ]
    assert dictionaries.chosen == ("_hoodie_commit_time", "city")
    rows = pa.concat_tables(parts)
    assert rows.column("city").type == pa.dictionary(pa.int32(), pa.string())
    assert rows.column("city").to_pylist() == ["lima"] * n + [None] * n
    assert rows.column("_hoodie_commit_time").to_pylist() == table.column("_hoodie_commit_time").to_pylist() * 2


def test_the_file_name_the_writer_fills_in_is_written_as_the_repeated_string(tmp_path: Path) -> None:
    table, avro = _sample()
    name = "f1-0_0-0-0_20240101000000000.parquet"
    location = str(tmp_path / name)
    result = write_base_file(Storage(), location, table, avro_schema=avro, compression="snappy", file_name=name)
    # the reference: the same rows with the name already in the column, written without the writer filling it in
    named = table.set_column(
        table.schema.get_field_index("_hoodie_file_name"),
        "_hoodie_file_name",
        pa.array([name] * table.num_rows, pa.string()),
    )
    reference = str(tmp_path / "reference.parquet")
    expected = write_base_file(Storage(), reference, named, avro_schema=avro, compression="snappy")
    assert pq.read_table(location).column("_hoodie_file_name").to_pylist() == [name] * table.num_rows
    assert pq.read_table(location).to_pylist() == pq.read_table(reference).to_pylist()
    assert _footer(location) == _footer(reference)
    assert result.footer_metadata == expected.footer_metadata
    assert Path(location).stat().st_size == Path(reference).stat().st_size
