"""Clustering group execution in the format layer (no Spark): sorted output near the target size, same rows,
metadata preserved, new file names recorded; z-order keys interleave the columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tableservice.hudi.action import cluster
from tableservice.hudi.action.cluster import ClusteringTask, run_clustering_task, sort_rows, z_order_key
from tableservice.hudi.action.compact import slice_at
from tableservice.hudi.action.tasks import ClusteringInput, ClusteringLayout, clustering_tasks
from tableservice.hudi.action.warm import _sample
from tableservice.hudi.file_group.base_file import write_base_file
from tableservice.hudi.file_group.merge import merge_config_from_properties
from tableservice.hudi.file_group.reader import BlockFilter, FileGroupReader
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import ReadOptions, read
from tableservice.hudi.table.schema import arrow_schema_from_avro
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table

META = ["_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path"]


def test_group_is_merged_sorted_and_split(tmp_path: Path) -> None:
    path = mor_table(tmp_path / "t", records=600, commits=3, max_file_records=50)
    table = HudiTable.open(Storage(), path)
    timeline = table.timeline()
    view = table.file_system_view(timeline=timeline)
    partition = view.partitions()[0]
    slices = view.latest_slices(partition)
    assert len(slices) > 3
    before = read(table, ReadOptions(filters=(("city", "=", partition.split("=")[1]),)))
    (task,) = clustering_tasks(
        table,
        timeline,
        "29990101000000000",
        [ClusteringInput.of(0, partition, slices, output_groups=2)],
        ClusteringLayout(target_file_bytes=1 << 30, sort_columns=("fare",)),
        write_token="0-1-0",
    )
    round_trip = ClusteringTask.from_json(task.to_json())
    assert round_trip == task
    stats = run_clustering_task(Storage(), task)
    assert len(stats) == 2
    written = [pq.read_table(str(Path(path) / (s.path or ""))) for s in stats]
    for s, t in zip(stats, written, strict=True):
        fares = t.column("fare").to_pylist()
        assert fares == sorted(fares)
        assert set(t.column("_hoodie_file_name").to_pylist()) == {Path(s.path or "").name}
        assert s.num_writes == t.num_rows == s.num_inserts and s.prev_commit == "null"
    assert written[0].column("fare").to_pylist()[-1] <= written[1].column("fare").to_pylist()[0]
    combined = pa.concat_tables(written).select([*META, "fare"]).sort_by("_hoodie_record_key")
    assert combined.to_pylist() == before.select([*META, "fare"]).sort_by("_hoodie_record_key").to_pylist()


def test_z_order_interleaves_ranks() -> None:
    t = pa.table({"a": [0, 1, 0, 1], "b": [0, 0, 1, 1]})
    keys = z_order_key(t, ["a", "b"])
    # Ranks are 0/1 in both columns: keys are the two bits interleaved at the top of the word.
    assert len(set(keys.tolist())) == 4
    assert list(np.argsort(keys)) == [0, 2, 1, 3]
    ordered = sort_rows(t, ["a", "b"], "z-order")
    assert ordered.num_rows == 4 and ordered.column("a").to_pylist() == [0, 0, 1, 1]
    linear = sort_rows(pa.table({"a": [3, 1, 2]}), ["a"], "linear")
    assert linear.column("a").to_pylist() == [1, 2, 3]


def test_linear_sort_of_one_column_matches_the_table_sort() -> None:
    # nulls last, NaN after numbers, -0.0 and 0.0 tied, ties in input order; chunked like a group's read
    fare = [3.0, None, float("nan"), 1.0, -0.0, 0.0, 1.0, None, 2.5]
    t = pa.concat_tables(
        [pa.table({"fare": fare[:4], "i": range(4)}), pa.table({"fare": fare[4:], "i": range(4, len(fare))})]
    )
    expected = t.sort_by([("fare", "ascending")]).column("i").to_pylist()
    assert sort_rows(t, ["fare"], "linear").column("i").to_pylist() == expected == [4, 5, 3, 6, 8, 0, 2, 1, 7]
    strings = pa.table({"s": ["b", None, "a", "b", ""], "i": range(5)})
    assert sort_rows(strings, ["s"], "linear").column("i").to_pylist() == [4, 2, 0, 3, 1]


def test_a_base_file_reads_in_the_read_schema_without_its_footer_metadata(tmp_path: Path) -> None:
    table, avro = _sample()
    name = "f1-0_0-0-0_20240101000000000.parquet"
    location = str(tmp_path / name)
    write_base_file(Storage(), location, table, avro_schema=avro, compression="snappy", file_name=name)
    assert pq.read_schema(location).metadata is not None  # the footer holds the Avro schema and the bloom filter
    reader = FileGroupReader(
        Storage(),
        table_name="t",
        merge_config=merge_config_from_properties({}, 9),
        schema=arrow_schema_from_avro(avro),
        block_filter=BlockFilter(9, frozenset(), None),
    )
    file_slice = slice_at(Storage(), "", "f1-0", "20240101000000000", location, ())
    columns = [n for n in reader.schema.names if n != "_hoodie_file_name"]
    (part,) = reader.read_slice(file_slice, columns)
    assert part.schema.equals(pa.schema([reader.schema.field(n) for n in columns]), check_metadata=True)
    assert part.to_pylist() == table.select(columns).to_pylist()


def test_a_column_of_few_values_sorts_by_ranks_as_the_table_sort_does() -> None:
    # nulls last, NaNs (either sign) after numbers, -0.0 and 0.0 tied, ties in input order; chunked
    rng = np.random.default_rng(7)
    values = [3.5, None, float("nan"), -float("nan"), 1.0, -0.0, 0.0, -2.25, 1e300]
    picks = rng.integers(0, len(values), 3000)
    fare = [values[i] for i in picks]
    t = pa.concat_tables(
        [pa.table({"fare": fare[:1000], "i": range(1000)}), pa.table({"fare": fare[1000:], "i": range(1000, 3000)})]
    )
    assert cluster._order_by_ranks(t.column("fare")) is not None  # the rank path
    expected = t.sort_by([("fare", "ascending")]).column("i").to_pylist()
    assert sort_rows(t, ["fare"], "linear").column("i").to_pylist() == expected
    words = pa.table({"s": [["b", None, "a", "ab", ""][i % 5] for i in picks], "i": range(3000)})
    assert cluster._order_by_ranks(words.column("s")) is not None
    assert sort_rows(words, ["s"], "linear").column("i").to_pylist() == words.sort_by("s").column("i").to_pylist()
    many = pa.table({"x": rng.permutation(3000).astype(np.int64), "i": range(3000)})
    assert cluster._order_by_ranks(many.column("x")) is None  # mostly distinct: the comparison sort
    assert sort_rows(many, ["x"], "linear").column("i").to_pylist() == many.sort_by("x").column("i").to_pylist()


def test_z_order_keys_of_few_values_equal_those_of_arrows_ranks() -> None:
    rng = np.random.default_rng(11)
    values = [2.5, None, float("nan"), -0.0, 0.0, 7.0]
    a = [values[i] for i in rng.integers(0, len(values), 2000)]
    b = [["x", "y", None, "a"][i] for i in rng.integers(0, 4, 2000)]
    t = pa.concat_tables([pa.table({"a": a[:700], "b": b[:700]}), pa.table({"a": a[700:], "b": b[700:]})])
    for name in ("a", "b"):
        expected = np.asarray(pc.rank(t.column(name).combine_chunks(), sort_keys="ascending", tiebreaker="dense"))
        ranks = cluster._few_value_ranks(t.column(name))
        assert ranks is not None and ranks.tolist() == expected.astype(np.uint64).tolist()
    keys = z_order_key(t, ["a", "b"])
    assert (
        np.argsort(keys, kind="stable").tolist()
        == sort_rows(t.append_column("i", pa.array(range(2000))), ["a", "b"], "z-order").column("i").to_pylist()
    )
