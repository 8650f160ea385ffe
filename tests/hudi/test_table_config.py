from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tableservice.errors import InvalidTableConfigError, UnsupportedTableError
from tableservice.hudi.table.config import (
    TableConfig,
    load_table_config,
    parse_table_config,
    store_table_config,
    table_checksum,
)
from tableservice.hudi.table.properties import format_properties, parse_properties
from tableservice.storage import Storage
from tests.support.fixtures import fixture_names, fixture_table, fixture_table_readonly

V6 = "sample_table/cow/v6_nonpartitioned"


def _props(**extra: str) -> dict[str, str]:
    base = {
        "hoodie.table.name": "t",
        "hoodie.database.name": "db",
        "hoodie.table.type": "MERGE_ON_READ",
        "hoodie.table.version": "8",
        "hoodie.timeline.layout.version": "2",
    }
    base["hoodie.table.checksum"] = str(table_checksum("db", "t"))
    base.update(extra)
    return base


def test_parse_java_escapes() -> None:
    text = "#c\n! also comment\nkey\\:a=va\\:lue\\=x\ncont=a\\\n   b\nspace key\n u=\\u00e9\n"
    props = parse_properties(text)
    assert props == {"key:a": "va:lue=x", "cont": "ab", "space": "key", "u": "é"}


@given(st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=30), max_size=8))
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert parse_properties(format_properties(props, ["comment"])) == props


@pytest.mark.parametrize("name", [n for n in fixture_names() if "v6_empty" not in n] or ["none"])
def test_every_fixture_config_parses_and_checksums(name: str) -> None:
    if name == "none":
        pytest.skip("no fixtures")
    table = fixture_table_readonly(name)
    config = load_table_config(Storage(), str(table))
    assert config.properties["hoodie.table.checksum"] == str(table_checksum(config.database, config.name))
    assert config.version in (6, 8, 9)
    assert config.layout_version == (1 if config.version == 6 else 2)


def test_rewrite_preserves_unknown_keys_and_reads_back(tmp_path: Path) -> None:
    table = fixture_table(V6, tmp_path)
    storage = Storage()
    before = load_table_config(storage, str(table))
    updated = before.with_updates({"my.custom.key": "a:b=c", "hoodie.table.name": "renamed"})
    store_table_config(storage, str(table), updated)
    after = load_table_config(storage, str(table))
    assert dict(after.properties) == dict(updated.properties)
    assert after.get("hoodie.table.create.schema") == before.get("hoodie.table.create.schema")
    assert after.properties["hoodie.table.checksum"] == str(table_checksum(before.database, "renamed"))
    assert not (table / ".hoodie" / "hoodie.properties.backup").exists()


def test_backup_is_used_when_main_file_is_garbage(tmp_path: Path) -> None:
    table = fixture_table(V6, tmp_path)
    meta = table / ".hoodie"
    (meta / "hoodie.properties.backup").write_bytes((meta / "hoodie.properties").read_bytes())
    (meta / "hoodie.properties").write_bytes(b"\x00\x01garbage")
    config = load_table_config(Storage(), str(table))
    assert config.name == "v6_nonpartitioned"


def test_garbage_properties_names_file(tmp_path: Path) -> None:
    table = fixture_table(V6, tmp_path)
    path = table / ".hoodie" / "hoodie.properties"
    path.write_bytes(b"\x00\x01\x02garbage")
    with pytest.raises(InvalidTableConfigError) as err:
        load_table_config(Storage(), str(table))
    assert "hoodie.properties" in str(err.value)


def test_wrong_checksum_is_rejected() -> None:
    props = _props()
    props["hoodie.table.checksum"] = "12345"
    with pytest.raises(InvalidTableConfigError, match="12345"):
        TableConfig(props, path="x/hoodie.properties")


def test_unknown_version_is_unsupported() -> None:
    with pytest.raises(UnsupportedTableError, match=r"hoodie\.table\.version=7"):
        TableConfig(_props(**{"hoodie.table.version": "7"}))


def test_missing_required_key() -> None:
    props = _props()
    del props["hoodie.table.type"]
    with pytest.raises(InvalidTableConfigError, match=r"hoodie\.table\.type"):
        TableConfig(props)


def test_layout_mismatch() -> None:
    with pytest.raises(InvalidTableConfigError, match="layout"):
        TableConfig(_props(**{"hoodie.timeline.layout.version": "1"}))


def test_typed_accessors() -> None:
    c = parse_table_config(
        format_properties(
            _props(**{"hoodie.table.partition.fields": "a:SIMPLE,b", "hoodie.table.ordering.fields": "x,y"}), []
        ).encode(),
        path="p",
    )
    assert c.partition_fields == ("a", "b")
    assert c.ordering_fields == ("x", "y")
    assert c.timeline_folder == ".hoodie/timeline"
    assert c.history_folder == ".hoodie/timeline/history"
    assert c.is_mor and not c.has_metadata_table
