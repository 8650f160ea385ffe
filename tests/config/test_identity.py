"""One name per table: the configured `name`, else `hoodie.table.name`; two tables with one name are refused with
both URIs named (they would share metrics, lock look-ups and log lines), and the name is what errors and log lines
of the format layer say."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from tableservice.cli import main
from tableservice.config import TableEntry, load_config, named_tables
from tableservice.errors import ConfigError, InvalidPlanError
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action, Instant, State
from tableservice.locks import InProcessLockProvider
from tableservice.service.daemon import Daemon
from tableservice.service.table_state import TableSettings
from tableservice.service.table_worker import TableWorker
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table


def _entry(uri: str, name: str | None = None) -> TableEntry:
    return TableEntry.model_validate({"uri": uri, **({"name": name} if name else {})})


def test_names_come_from_the_config_then_the_table() -> None:
    read = {"/a": "trips", "/b": "trips", "/c": "orders", "/d": None}.get
    named, clashes = named_tables([_entry("/a"), _entry("/b", "trips9"), _entry("/c"), _entry("/d")], read)
    assert [(e.uri, e.name) for e in named] == [("/a", "trips"), ("/b", "trips9"), ("/c", "orders"), ("/d", "/d")]
    assert clashes == []


def test_duplicates_are_refused_with_both_uris() -> None:
    read = {"/a": "trips", "/b": "trips", "/c": "x"}.get
    named, clashes = named_tables([_entry("/a"), _entry("/b"), _entry("/c", "trips")], read)
    # the configured name is the operator's choice: it keeps the name, the first table read keeps nothing
    assert [(e.uri, e.name) for e in named] == [("/c", "trips")]
    assert [(c.name, c.uri, c.other) for c in clashes] == [("trips", "/a", "/c"), ("trips", "/b", "/c")]
    assert "/a" in str(clashes[0]) and "/c" in str(clashes[0]) and "`name`" in str(clashes[0])
    # a table served now keeps its name against one discovered later, and its hoodie.properties is not read again
    reads: list[str] = []

    def counted(uri: str) -> str | None:
        reads.append(uri)
        return read(uri)

    named, clashes = named_tables([_entry("/a"), _entry("/b")], counted, taken={"trips": "/b"})
    assert [(e.uri, e.name) for e in named] == [("/b", "trips")]
    assert [(c.uri, c.other) for c in clashes] == [("/a", "/b")]
    assert reads == ["/a"]


def _config(tmp_path: Path, tables: list[tuple[str, str | None]]) -> Path:
    entries = "\n".join(f"  - uri: {u}" + (f"\n    name: {n}" if n else "") for u, n in tables)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"service:\n  http: {{host: 127.0.0.1, port: 0}}\ntables:\n{entries}\n")
    return cfg


def test_the_cli_and_the_daemon_refuse_two_tables_with_one_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = mor_table(tmp_path / "a", records=40, commits=1, name="trips")
    b = mor_table(tmp_path / "b", records=40, commits=1, name="trips")
    cfg = _config(tmp_path, [(a, None), (b, None)])
    for command in (["once", "--config", str(cfg)], ["lock", "status", "--config", str(cfg), "--table", "trips"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert a in err and b in err and "'trips'" in err, err
    daemon = Daemon(str(cfg), load_config(str(cfg)), executor=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as info:
        anyio.run(daemon.run)
    assert a in str(info.value) and b in str(info.value)
    # a name in the configuration settles it
    renamed = load_config(str(_config(tmp_path, [(a, None), (b, "trips9")]))).tables
    named, clashes = named_tables(renamed, lambda uri: "trips")
    assert [e.name for e in named] == ["trips", "trips9"] and clashes == []


def test_errors_and_log_lines_carry_the_configured_name(tmp_path: Path, caplog: Any) -> None:
    path = mor_table(tmp_path / "t", records=40, commits=1, name="trips")
    table = HudiTable.open(Storage(), path, label="trips9")
    assert (table.name, table.label) == ("trips", "trips9")  # Hudi's name stays for locks and the metadata table
    pending = Instant("20990101000000000", Action.COMMIT, State.REQUESTED)
    with pytest.raises(InvalidPlanError) as info:
        table.commit_metadata(pending)
    assert info.value.table == "trips9" and "trips9" in str(info.value)
    worker = TableWorker(
        TableSettings(uri=path, name="trips9"),
        Storage(),
        InProcessLockProvider(),
        executor=object(),  # type: ignore[arg-type]
    )
    with caplog.at_level(logging.DEBUG):
        worker.poll()
    assert worker.context().table.label == "trips9" and worker.label == "trips9"
    tables = {getattr(r, "table", None) for r in caplog.records} - {None}
    assert tables <= {"trips9"}, tables
