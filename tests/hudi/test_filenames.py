from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tableservice.errors import InvalidPlanError
from tableservice.hudi.action.plan_paths import relative_to_table, resolve_absolute, resolve_in_partition
from tableservice.hudi.file_group.filenames import (
    BaseFileName,
    LogFileName,
    escape_partition_value,
    parse_base_file_name,
    parse_log_file_name,
    partition_path_for,
    unescape_partition_value,
)

file_ids = st.builds(lambda u, n: f"{u}-{n}", st.uuids().map(str), st.integers(0, 99))
instants = st.integers(10**16, 10**17 - 1).map(str)
tokens = st.tuples(st.integers(0, 999), st.integers(0, 999), st.integers(0, 999)).map(lambda t: f"{t[0]}-{t[1]}-{t[2]}")


@given(file_ids, tokens, instants)
def test_base_file_name_round_trip(fid: str, token: str, instant: str) -> None:
    name = BaseFileName(fid, token, instant).name
    assert parse_base_file_name(name) == BaseFileName(fid, token, instant, ".parquet")
    assert parse_log_file_name(name) is None


@given(file_ids, instants, st.integers(1, 1000), tokens, st.booleans())
def test_log_file_name_round_trip(fid: str, instant: str, version: int, token: str, cdc: bool) -> None:
    name = LogFileName(fid, instant, version, token, cdc=cdc).name
    assert parse_log_file_name(name) == LogFileName(fid, instant, version, token, cdc=cdc)
    assert parse_base_file_name(name) is None


def test_real_names() -> None:
    log = parse_log_file_name(".d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0_20250331030642808.log.1_0-26-85")
    assert log == LogFileName("d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0", "20250331030642808", 1, "0-26-85")
    base = parse_base_file_name("5aa8d873-d341-4a43-aef0-51c33fec06f1-0_0-21-52_20260403184238571.parquet")
    assert base == BaseFileName("5aa8d873-d341-4a43-aef0-51c33fec06f1-0", "0-21-52", "20260403184238571")
    assert parse_base_file_name(".hoodie_partition_metadata") is None
    assert parse_log_file_name(".hoodie_partition_metadata") is None


def test_log_file_ordering() -> None:
    names = [
        LogFileName("f", "2", 1, "0-1-1"),
        LogFileName("f", "1", 2, "0-1-1"),
        LogFileName("f", "1", 1, "1-1-1"),
        LogFileName("f", "1", 1, "0-1-1"),
    ]
    assert [(n.instant_time, n.version, n.write_token) for n in sorted(names, key=lambda n: n.sort_key)] == [
        ("1", 1, "0-1-1"),
        ("1", 1, "1-1-1"),
        ("1", 2, "0-1-1"),
        ("2", 1, "0-1-1"),
    ]


@given(st.text(max_size=20))
def test_partition_escaping_round_trip(value: str) -> None:
    escaped = escape_partition_value(value)
    assert "/" not in escaped and "=" not in escaped
    assert unescape_partition_value(escaped) == value


def test_partition_paths() -> None:
    assert partition_path_for(("a", "b"), ("1", None), hive_style=True, url_encode=False) == (
        "a=1/b=__HIVE_DEFAULT_PARTITION__"
    )
    assert partition_path_for(("d",), ("2024/01/02",), hive_style=False, url_encode=True) == "2024%2F01%2F02"
    assert partition_path_for((), (), hive_style=True, url_encode=False) == ""


def test_plan_paths_inside_the_table() -> None:
    assert relative_to_table("/data/t", "file:/data/t/p=1/f.parquet", plan_file="x") == "p=1/f.parquet"
    assert relative_to_table("s3://b/t", "s3a://b/t/f.parquet", plan_file="x") == "f.parquet"
    # A plan written where the table lived under another root maps onto this base path.
    assert resolve_absolute("/copy/t", "/opt/warehouse/t/p/f.parquet", plan_file="x") == "/copy/t/p/f.parquet"
    assert resolve_in_partition("/t", "p=1", "f.parquet", plan_file="x") == "/t/p=1/f.parquet"


@pytest.mark.parametrize(
    "call",
    [
        lambda: relative_to_table("/data/t", "/data/t/../other/f.parquet", plan_file="plan.requested"),
        lambda: relative_to_table("/data/t", "/etc/passwd", plan_file="plan.requested"),
        lambda: resolve_in_partition("/t", "../x", "f.parquet", plan_file="plan.requested"),
        lambda: resolve_in_partition("/t", "p", "../../f.parquet", plan_file="plan.requested"),
        lambda: resolve_in_partition("/t", "/abs", "f.parquet", plan_file="plan.requested"),
    ],
)
def test_plan_paths_escaping_the_table_are_refused(call: object) -> None:
    with pytest.raises(InvalidPlanError) as err:
        call()  # type: ignore[operator]
    assert "plan.requested" in str(err.value)
