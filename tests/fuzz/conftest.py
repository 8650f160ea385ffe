"""The parsers and their seeds, built once per session (see `tests.support.fuzz_targets`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fuzz_targets import Target, build_targets


@pytest.fixture(scope="session")
def fuzz_targets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Target]:
    return {t.name: t for t in build_targets(Path(tmp_path_factory.mktemp("fuzz")))}
