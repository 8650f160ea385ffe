"""The daemon in-process on three tables (shared Spark session): metrics scraped over HTTP show the completed
compactions, hudi-rs reads the same rows; bad configurations fail with exit code 2 naming the key."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tableservice.cli import main
from tableservice.config import load_config
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.service.daemon import Daemon
from tableservice.storage import Storage
from tests.support.daemon_helpers import config_text, mor_table
from tests.support.oracle import assert_same_rows, hudi_read

FILE_NAME = "_hoodie_file_name"


def _completed_compactions(path: str) -> int:
    return sum(1 for i in HudiTable.open(Storage(), path).timeline().completed() if i.action is Action.COMPACTION)


@pytest.mark.spark
@pytest.mark.oracle
def test_daemon_compacts_three_tables_and_reports_metrics(tmp_path: Path, spark_executor: Any) -> None:
    tables = [mor_table(tmp_path / f"t{i}", seed=i, name=f"t{i}") for i in range(3)]
    before = {t: hudi_read(t) for t in tables}
    cfg = tmp_path / "config.yaml"
    cfg.write_text(config_text(tables))
    daemon = Daemon(str(cfg), load_config(str(cfg)), executor=spark_executor)
    scraped: dict[str, str] = {}

    async def scenario() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                await anyio.sleep(0.5)
                if all(_completed_compactions(t) >= 1 for t in tables) and not len(daemon.running):
                    break
            assert daemon.http_port is not None

            def scrape(path: str) -> str:
                url = f"http://127.0.0.1:{daemon.http_port}{path}"
                with urllib.request.urlopen(url, timeout=10) as resp:
                    return str(resp.read().decode())

            await anyio.sleep(1.5)  # one more poll, so pending gauges reflect the completed state
            scraped["metrics"] = await anyio.to_thread.run_sync(scrape, "/metrics")
            scraped["ready"] = await anyio.to_thread.run_sync(scrape, "/readyz")
            scraped["status"] = await anyio.to_thread.run_sync(scrape, "/status")
            daemon.request_stop()

    anyio.run(scenario)
    samples = {
        (s.name, s.labels.get("table"), s.labels.get("action")): s.value
        for family in text_string_to_metric_families(scraped["metrics"])
        for s in family.samples
    }
    for i, t in enumerate(tables):
        assert _completed_compactions(t) == 1
        name = f"table{i}"
        assert samples[("tableservice_actions_completed_total", name, "compaction")] == 1
        assert samples[("tableservice_actions_scheduled_total", name, "compaction")] == 1
        assert samples[("tableservice_written_bytes_total", name, "compaction")] > 0
        assert samples[("tableservice_pending_actions", name, "compaction")] == 0
        assert samples[("tableservice_last_successful_poll_timestamp_seconds", name, None)] > 0
        after = hudi_read(t)
        assert_same_rows(after.drop_columns([FILE_NAME]), before[t].drop_columns([FILE_NAME]), t)
    assert "table0" in scraped["status"]


BAD_CONFIGS = {
    "unknown key": ("service:\n  poll_intervall_seconds: 5\n", "service.poll_intervall_seconds"),
    "wrong type": ("service:\n  max_concurrent_actions: many\n", "service.max_concurrent_actions"),
    "negative interval": ("service:\n  poll_interval_seconds: -1\n", "service.poll_interval_seconds"),
    "master and remote": ("spark:\n  master: local[2]\n  remote: sc://localhost:15002\n", "spark"),
    "secret in file": ("storage:\n  aws_secret_access_key: abc\n", "storage.aws_secret_access_key"),
    "bad trigger": (
        "defaults:\n  compaction:\n    hoodie.compact.inline.trigger.strategy: SOMETIMES\n",
        "hoodie.compact.inline.trigger.strategy",
    ),
    "table without uri": ("tables:\n  - name: x\n", "tables[0].uri"),
    "bad yaml": ("service: [unclosed\n", "line"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_exits_2_naming_the_key(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, key = BAD_CONFIGS[case]
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    assert main(["run", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert key in err, err
    assert "abc" not in err  # secrets are never echoed
