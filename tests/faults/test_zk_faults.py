"""ZooKeeper server stop (SIGKILL) or hang (SIGSTOP) while a pass holds the ZooKeeper table lock, at a write of its
commit section: the pass completes or stops with a typed lock error; with the server back and the dead session
expired, the recovery pass (same lock configuration) leaves the table exactly as the model says (hudi-rs rows),
no orphan, nothing pending, the metadata table in step."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.faults.harness import Harness, lazy_executor
from tests.support.faults.report import print_table
from tests.support.faults.zk_faults import SIGNALS, zk_trial
from tests.support.zk.server import ZooKeeperServer

pytestmark = [pytest.mark.zookeeper, pytest.mark.oracle, pytest.mark.slow]
SERVICES = ("clean", "rollback", "archival", "metadata")  # the services that run no Spark job


@pytest.fixture(scope="module")
def zk(zk_tools: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A server of the module's own: the trials kill and stop it."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk-faults"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def zk_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with lazy_executor() as executor:
        h = Harness(Path(tmp_path_factory.mktemp("zk-harness")), executor, seed=22)
        yield h
        print_table(h.results)


@pytest.mark.parametrize("service", SERVICES)
def test_zookeeper_lost_in_the_commit_section(service: str, zk_harness: Harness, zk: ZooKeeperServer) -> None:
    """Two trials per service, one per signal, each at a random write of the commit section."""
    for name in SIGNALS:
        result = zk_trial(zk_harness, zk, service, name, commit=True)
        assert result.fired, result.describe()
        assert result.typed, result.describe()  # completed, or exit 1 with a LockError
        assert result.child_rc == 0 or "lock" in result.child_error, result.describe()
        assert result.recovered, result.describe()
        f = result.findings
        found = (f.rows_lost, f.rows_duplicated, f.rows_changed, f.pending, f.orphans, f.metadata_differences)
        assert found == (0, 0, 0, [], [], []), result.describe()
        assert f.read_error is None, result.describe()
