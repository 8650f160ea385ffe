"""Merge configurations that used to fail late: event-time ordering without ordering fields (a numpy broadcast
ValueError in the merge, after `once` had written a compaction plan) and merge configurations the daemon cannot
apply (refused with a typed error naming hoodie.properties before any plan is written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tableservice.cli import main
from tableservice.errors import UnsupportedTableError
from tableservice.hudi.table.config import TableConfig, load_table_config, store_table_config
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import read
from tableservice.storage import Storage
from tests.support.daemon_helpers import config_text, mor_table
from tests.support.oracle import assert_same_rows, hudi_read

ORDERING_KEYS = ("hoodie.table.ordering.fields", "hoodie.table.precombine.field")


def _edit_properties(path: str, drop: tuple[str, ...], extra: dict[str, str]) -> None:
    storage = Storage()
    config = load_table_config(storage, path)
    props = {k: v for k, v in config.properties.items() if k not in drop}
    props.update(extra)
    store_table_config(storage, path, TableConfig(props, path=config.path))


@pytest.mark.oracle
def test_event_time_ordering_without_ordering_fields_reads_as_hudi_does(tmp_path: Path) -> None:
    """Every record then has Hudi's default ordering value; of equal ones the later wins."""
    path = mor_table(tmp_path / "t", records=100, commits=3)
    _edit_properties(path, ORDERING_KEYS, {"hoodie.record.merge.mode": "EVENT_TIME_ORDERING"})
    ours = read(HudiTable.open(Storage(), path))
    assert ours.num_rows > 0
    assert_same_rows(ours, hudi_read(path), "event time without ordering fields")


def test_a_merge_configuration_the_daemon_cannot_apply_gets_no_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = mor_table(tmp_path / "t", records=100, commits=3)
    _edit_properties(
        path, (), {"hoodie.record.merge.mode": "CUSTOM", "hoodie.record.merge.strategy.id": "no-such-merger-registered"}
    )
    table = HudiTable.open(Storage(), path)
    with pytest.raises(UnsupportedTableError) as err:
        table.merge_config()
    assert err.value.path is not None and err.value.path.endswith("hoodie.properties")
    assert err.value.table == "t"
    before = [(i.requested_time, i.state) for i in table.reload()]
    cfg = tmp_path / "c.yaml"
    cfg.write_text(config_text([path], max_delta_commits=1))
    assert main(["once", "--config", str(cfg)]) == 1
    err_text = capsys.readouterr().err
    assert "error: not supported: " in err_text and "no-such-merger-registered" in err_text
    assert "hoodie.properties" in err_text
    assert [(i.requested_time, i.state) for i in HudiTable.open(Storage(), path).timeline()] == before
