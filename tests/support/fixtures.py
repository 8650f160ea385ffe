"""Access to the real Spark-written Hudi tables in ../shared/fixtures/hudi-rs (ground truth), and to the real
tables kept in tests/data (`EXTRA`: archive, folder of the table inside it)."""

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
# A Hudi 0.14 table of version 6 with a metadata table (see tests/data/v6_cow_partitioned_mdt.README.md).
EXTRA = {
    "tests-data/cow/v6_partitioned_metadata": (REPO / "tests" / "data" / "v6_cow_partitioned_mdt.zip", "trips_table"),
}


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
    shared = [str(p.relative_to(FIXTURES))[: -len(".zip")] for p in FIXTURES.rglob("*.zip")]
    return sorted([*shared, *EXTRA])


def fixture_archive(name: str) -> tuple[Path, str]:
    """The zip of a fixture and the folder of its table inside it."""
    if name in EXTRA:
        return EXTRA[name]
    return fixture_root() / f"{name}.zip", Path(name).name


def _unpacked(name: str) -> Path:
    """The read-only unpacked copy of one fixture (cached across runs)."""
    archive, folder = fixture_archive(name)
    target = _CACHE / name
    table = target / folder
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


def metadata_fixture_names(partition: str | None = None) -> list[str]:
    """The fixtures whose table has a metadata table (a `.hoodie/metadata/` folder in the archive), with a
    `partition` folder in it when one is named."""
    wanted = f"/.hoodie/metadata/{partition}/" if partition else "/.hoodie/metadata/.hoodie/"
    out = []
    for name in fixture_names():
        with zipfile.ZipFile(fixture_archive(name)[0]) as zf:
            if any(wanted in n for n in zf.namelist()):
                out.append(name)
    return out
