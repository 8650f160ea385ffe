"""Our file-system view against hudi-rs's file slices on every real table."""

from __future__ import annotations

import pytest

from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.storage import Storage
from tests.support.fixtures import fixture_names, fixture_table_readonly
from tests.support.oracle import SliceKey, hudi_slices

NAMES = fixture_names()


def _our_slices(path: str, as_of: str | None = None) -> set[SliceKey]:
    table = HudiTable.open(Storage(), path)
    view = table.file_system_view(as_of=as_of)
    out = set()
    for s in view.latest_slices():
        base = s.base_file.file_name if s.base_file else ""
        out.add((s.partition_path, s.file_id, base, tuple(sorted(lf.file_name for lf in s.log_files))))
    return out


@pytest.mark.oracle
@pytest.mark.parametrize("name", NAMES or ["none"])
def test_latest_slices_match_hudi_rs(name: str) -> None:
    if name == "none":
        pytest.skip("no fixtures")
    path = str(fixture_table_readonly(name))
    assert _our_slices(path) == hudi_slices(path)


@pytest.mark.oracle
@pytest.mark.parametrize("name", NAMES or ["none"])
def test_slices_as_of_every_completed_instant_match_hudi_rs(name: str) -> None:
    if name == "none":
        pytest.skip("no fixtures")
    path = str(fixture_table_readonly(name))
    table = HudiTable.open(Storage(), path)
    instants = table.timeline().completed_writes().instants
    assert instants or name.endswith("_empty")
    for instant in instants:
        t = instant.requested_time
        ours = {(p, f, b): logs for p, f, b, logs in _our_slices(path, t)}
        theirs = {(p, f, b): logs for p, f, b, logs in hudi_slices(path, t)}
        # hudi-rs keeps later log files in a slice and drops their blocks while reading; we leave out log files
        # written after the instant. Base files must agree exactly, and our logs are a subset of theirs.
        assert ours.keys() == theirs.keys(), f"as of {t}"
        for key, logs in ours.items():
            assert set(logs) <= set(theirs[key]), f"as of {t}: {key}"
