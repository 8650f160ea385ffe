"""`tableservice pause|resume` edit one table entry of the configuration file in place: only the pause lines
change (comments, order, quoting kept; pause then resume gives the file back byte for byte), the result loads with
the reason as given, and layouts the line editor does not handle are refused with the file untouched."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tableservice.cli import main
from tableservice.config import load_config
from tableservice.config.pause import set_paused
from tableservice.errors import ConfigError

CONFIG = """\
# the daemon's configuration (comments must survive)
service:
  poll_interval_seconds: 5   # seconds
tables:
  # the first table
  - uri: {a}
    name: trips        # trips of the week
    policy:
      compaction:
        hoodie.compact.inline.max.delta.commits: 3

  - name: 'riders'
    uri: "{b}"
    locks: {{}}
  # a trailing comment of the list
discovery: []
"""


def write_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(CONFIG.format(a=tmp_path / "a", b=tmp_path / "b"))
    cfg.chmod(0o640)
    return cfg


def test_pause_then_resume_gives_the_file_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path)
    original = cfg.read_text()
    reason = 'backfill: "don\'t touch" — until 18:00 #ops'
    assert main(["pause", "--config", str(cfg), "--table", "trips", "--reason", reason]) == 0
    assert capsys.readouterr().out.startswith(f"paused trips in {cfg}: {reason}")
    edited = cfg.read_text()
    added = [line for line in edited.splitlines() if line not in original.splitlines()]
    assert added == ["    paused: true", '    paused_reason: "backfill: \\"don\'t touch\\" — until 18:00 #ops"']
    assert edited.replace("\n".join(added) + "\n", "") == original  # nothing else moved
    config = load_config(str(cfg))
    assert [(t.name, t.paused, t.paused_reason) for t in config.tables] == [
        ("trips", True, reason),
        ("riders", False, None),
    ]
    assert stat.S_IMODE(os.stat(cfg).st_mode) == 0o640
    assert main(["pause", "--config", str(cfg), "--table", "trips", "--reason", "again"]) == 0
    assert load_config(str(cfg)).tables[0].paused_reason == "again"  # a new reason replaces the old one
    assert main(["resume", "--config", str(cfg), "--table", "trips"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"resumed trips in {cfg}"
    assert cfg.read_text() == original
    assert main(["resume", "--config", str(cfg), "--table", "trips"]) == 0
    assert capsys.readouterr().out.strip() == "trips was not paused"
    assert cfg.read_text() == original


def test_pause_the_last_entry_by_uri(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    original = cfg.read_text()
    done = set_paused(str(cfg), str(tmp_path / "b"), True, "disk full on the writer")
    assert (done.changed, done.table.name, done.table.paused_reason) == (True, "riders", "disk full on the writer")
    lines = cfg.read_text().splitlines()
    at = lines.index("    locks: {}")
    assert lines[at + 1 : at + 4] == [
        "    paused: true",
        '    paused_reason: "disk full on the writer"',
        "  # a trailing comment of the list",
    ]
    assert [(t.paused, t.paused_reason) for t in load_config(str(cfg)).tables] == [
        (False, None),
        (True, "disk full on the writer"),
    ]
    assert set_paused(str(cfg), "riders", False).changed
    assert cfg.read_text() == original


@pytest.mark.parametrize(
    ("text", "table", "problem"),
    [
        ("tables:\n  - {{uri: {a}, name: trips}}\n", "trips", "flow style"),
        ("tables:\n  - uri: {a}\n    name: trips\n", "nobody", "is not listed under `tables:`"),
        ("tables:\n  - uri: {a}\n    name: trips\n    paused: true\n    paused_reason: >\n      long\n", "trips",
         "spans several lines"),
    ],
)  # fmt: skip
def test_layouts_the_editor_refuses(tmp_path: Path, text: str, table: str, problem: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text.format(a=tmp_path / "a"))
    before = cfg.read_bytes()
    with pytest.raises(ConfigError) as e:
        set_paused(str(cfg), table, True, "x")
    assert problem in e.value.problem
    assert cfg.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c.yaml"]  # no temporary file left
