from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.faults.harness import Harness
from tests.support.faults.report import print_table


@pytest.fixture(scope="package")
def harness(tmp_path_factory: pytest.TempPathFactory, spark_executor: Any) -> Iterator[Harness]:
    """One harness for the fault tests: templates built once, recovery passes on the run's SparkSession; the
    table of all trials is printed at the end."""
    h = Harness(Path(tmp_path_factory.mktemp("faults")), spark_executor, seed=20)
    yield h
    print_table(h.results)
