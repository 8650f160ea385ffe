"""Access to the real Spark-written Hudi tables in ../shared/fixtures/hudi-rs (ground truth)."""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
REFERENCE_AVSC = SHARED / "reference" / "avsc"
FIXTURES = Path(os.environ.get("TABLESERVICE_FIXTURES", SHARED / "fixtures" / "hudi-rs"))
_CACHE = Path(os.environ.get("TABLESERVICE_FIXTURE_CACHE", "/tmp/tableservice-fixtures"))


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def fixture_root() -> Path:
    """The fixture folder; skips the test (or fails in CI) when it is absent."""
    if not FIXTURES.is_dir():
        if in_ci():
            pytest.fail(f"fixture folder {FIXTURES} is missing in CI")
        pytest.skip(f"fixture folder {FIXTURES} is absent (fresh clone without ../shared)")
    return FIXTURES


def fixture_names() -> list[str]:
    """Archive names relative to the fixture root without `.zip`, e.g. `sample_table/cow/v6_nonpartitioned`."""
    if not FIXTURES.is_dir():
        return []
    return sorted(str(p.relative_to(FIXTURES))[: -len(".zip")] for p in FIXTURES.rglob("*.zip"))


def _unpacked(name: str) -> Path:
    """The read-only unpacked copy of one fixture (cached across runs)."""
    root = fixture_root()
    archive = root / f"{name}.zip"
    target = _CACHE / name
    table = target / Path(name).name
    marker = target / ".complete"
    if not marker.exists():
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        with zipfile.ZipFile(archive) as zf:
            for member in zf.infolist():
                if member.filename.startswith("__MACOSX"):
                    continue
                zf.extract(member, target)
        marker.touch()
    return table


def fixture_table(name: str, dest: Path) -> Path:
    """A private copy of one fixture table under `dest` that a test may change. Keeps file mtimes."""
    src = _unpacked(name)
    out = dest / Path(name).name
    shutil.copytree(src, out, copy_function=shutil.copy2)
    return out


def fixture_table_readonly(name: str) -> Path:
    """The shared unpacked copy: never modify it."""
    return _unpacked(name)


def metadata_fixture_names() -> list[str]:
    """The fixtures whose table has a metadata table (a `.hoodie/metadata/` folder in the archive)."""
    out = []
    for name in fixture_names():
        with zipfile.ZipFile(FIXTURES / f"{name}.zip") as zf:
            if any("/.hoodie/metadata/.hoodie/" in n for n in zf.namelist()):
                out.append(name)
    return out
