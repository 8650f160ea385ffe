"""A log file cut anywhere (a writer that died mid-append, a partial upload) keeps every block that ends before the
cut: those decode to the same header, footer and rows as in the whole file, and the rest is one corrupt region."""

from __future__ import annotations

from pathlib import Path

from tests.support.fuzz_mutators import truncation_points
from tests.support.fuzz_targets import Target, read_log_file

CUTS_PER_FILE = 24


def _check_truncations(seed: bytes, scratch: Path) -> int:
    whole = scratch / ".whole_1.log.1_0-0-0"
    whole.write_bytes(seed)
    original = read_log_file(str(whole))
    cut_file = scratch / ".cut_1.log.1_0-0-0"
    checked = 0
    for cut in truncation_points(len(seed), CUTS_PER_FILE):
        cut_file.write_bytes(seed[:cut])
        got = read_log_file(str(cut_file))
        kept = [b for b in original if b[0] != "corrupt" and b[1] + b[2] <= cut]
        assert got[: len(kept)] == kept, f"cut at {cut}"
        rest = got[len(kept) :]
        end_of_kept = kept[-1][1] + kept[-1][2] if kept else 0
        if cut > end_of_kept and not any(b[0] == "corrupt" for b in original):
            # what follows the last whole block is unreadable: corrupt regions tiling the rest of the file
            assert [b[0] for b in rest] == ["corrupt"] * len(rest), f"cut at {cut}"
            assert sum(b[2] for b in rest) == cut - end_of_kept, f"cut at {cut}"
        checked += len(kept)
    return checked


def test_truncated_log_files_keep_the_blocks_before_the_cut(fuzz_targets: dict[str, Target], tmp_path: Path) -> None:
    kept = 0
    for seed in fuzz_targets["log_file"].seeds:
        kept += _check_truncations(seed, tmp_path)
    assert kept > 0


def test_truncated_archive_logs_keep_the_blocks_before_the_cut(fuzz_targets: dict[str, Target], tmp_path: Path) -> None:
    kept = 0
    for seed in fuzz_targets["archive_log"].seeds[:3]:
        kept += _check_truncations(seed, tmp_path)
    assert kept > 0
