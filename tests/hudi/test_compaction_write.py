"""The base files compaction and clustering write follow the table's `write` keys: codec, bloom filter and its size.
A file without a bloom filter carries no record-key range either, as Hudi's writers leave both out together."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tableservice.hudi.action.cluster import run_clustering_task
from tableservice.hudi.action.compact import run_compaction_task
from tableservice.hudi.action.tasks import (
    ClusteringInput,
    ClusteringLayout,
    CompactionInput,
    clustering_tasks,
    compaction_tasks,
)
from tableservice.hudi.file_group.base_file_reader import BaseFileFooter, read_base_file_footer
from tableservice.hudi.file_group.bloom import BloomFilterTypeCode
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import ReadOptions, read
from tableservice.planning.write import WritePolicy
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table

INSTANT = "29990101000000000"
KEY = "_hoodie_record_key"


def _compacted(path: str, policy: WritePolicy, token: str) -> tuple[BaseFileFooter, pa.Table, set[str]]:
    """The first slice with log files compacted under `policy`: the new file's footer, its rows (without the file
    name column) and the codecs of its column chunks."""
    table = HudiTable.open(Storage(), path)
    timeline = table.timeline()
    view = table.file_system_view(timeline=timeline)
    first = next(s for s in view.latest_slices() if s.log_files)
    (task,) = compaction_tasks(
        table,
        timeline,
        INSTANT,
        [CompactionInput.of(first)],
        compression=policy.compression_codec,
        bloom=policy.bloom_filter(table.config.populate_meta_fields),
        write_token=token,
    )
    stat = run_compaction_task(Storage(), task)
    location = str(Path(path) / (stat.path or ""))
    return _read(location)


def _read(location: str) -> tuple[BaseFileFooter, pa.Table, set[str]]:
    meta = pq.ParquetFile(location).metadata
    codecs = {
        meta.row_group(g).column(c).compression for g in range(meta.num_row_groups) for c in range(meta.num_columns)
    }
    rows = pq.read_table(location).drop_columns(["_hoodie_file_name"]).sort_by(KEY)
    return read_base_file_footer(Storage(), location), rows, codecs


def test_compaction_writes_the_codec_and_bloom_filter_the_keys_ask_for(tmp_path: Path) -> None:
    path = mor_table(tmp_path / "t", records=300, commits=3)
    default, rows, codecs = _compacted(path, WritePolicy(), "0-1-0")
    keys = rows.column(KEY).to_pylist()
    assert codecs == {"GZIP"} and default.bloom_filter_type is BloomFilterTypeCode.DYNAMIC_V0
    assert (default.min_record_key, default.max_record_key) == (min(keys), max(keys))
    bloom = default.bloom_filter()
    assert bloom is not None and bloom.might_contain_many(keys).all()

    off, off_rows, off_codecs = _compacted(
        path,
        WritePolicy.from_mapping(
            {"hoodie.parquet.bloom.filter.enabled": "false", "hoodie.parquet.compression.codec": "snappy"}
        ),
        "0-2-0",
    )
    assert off_codecs == {"SNAPPY"} and off_rows.equals(rows)
    assert (off.bloom_filter_type, off.bloom_filter_serialized, off.min_record_key, off.max_record_key) == (
        None,
        None,
        None,
        None,
    )
    assert not any("bloom" in k or "record_key" in k for k in off.key_value_metadata)

    small, small_rows, small_codecs = _compacted(
        path,
        WritePolicy.from_mapping(
            {
                "hoodie.parquet.bloom.filter.enabled": "false",
                "hoodie.index.type": "GLOBAL_BLOOM",  # a bloom index wants the filter whatever the switch says
                "hoodie.bloom.index.filter.type": "SIMPLE",
                "hoodie.index.bloom.num_entries": 500,
                "hoodie.index.bloom.fpp": 0.01,
                "hoodie.parquet.compression.codec": "zstd",
            }
        ),
        "0-3-0",
    )
    assert small_codecs == {"ZSTD"} and small_rows.equals(rows)
    # A SIMPLE filter carries no type code in the footer (Hudi's readers take its absence for SIMPLE).
    assert small.bloom_filter_type is BloomFilterTypeCode.SIMPLE
    assert "hoodie_bloom_filter_type_code" not in small.key_value_metadata
    assert default.key_value_metadata["hoodie_bloom_filter_type_code"] == "DYNAMIC_V0"
    simple = small.bloom_filter()
    assert simple is not None and simple.type_code is BloomFilterTypeCode.SIMPLE
    assert simple.might_contain_many(keys).all()
    assert bloom is not None and len(small.bloom_filter_serialized or "") < len(default.bloom_filter_serialized or "")


def test_clustering_writes_the_codec_and_bloom_filter_the_keys_ask_for(tmp_path: Path) -> None:
    path = mor_table(tmp_path / "t", records=300, commits=2, max_file_records=50)
    table = HudiTable.open(Storage(), path)
    timeline = table.timeline()
    view = table.file_system_view(timeline=timeline)
    partition = view.partitions()[0]
    policy = WritePolicy.from_mapping(
        {"hoodie.parquet.bloom.filter.enabled": False, "hoodie.parquet.compression.codec": "uncompressed"}
    )
    (task,) = clustering_tasks(
        table,
        timeline,
        INSTANT,
        [ClusteringInput.of(0, partition, view.latest_slices(partition), output_groups=1)],
        ClusteringLayout(target_file_bytes=1 << 30, sort_columns=("fare",)),
        compression=policy.compression_codec,
        bloom=policy.bloom_filter(table.config.populate_meta_fields),
    )
    (stat,) = run_clustering_task(Storage(), task)
    footer, rows, codecs = _read(str(Path(path) / (stat.path or "")))
    assert codecs == {"UNCOMPRESSED"} and rows.num_rows == stat.num_writes
    # The group's rows, as a snapshot read of its partition gives them.
    before = read(table, ReadOptions(filters=(("city", "=", partition.split("=")[1]),)))
    columns = [KEY, "_hoodie_commit_time", "fare", "rider"]
    assert rows.select(columns).to_pylist() == before.select(columns).sort_by(KEY).to_pylist()
    assert (footer.bloom_filter_serialized, footer.min_record_key) == (None, None)
