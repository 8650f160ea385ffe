"""Bad bytes in the configuration file: every YAML problem is a ConfigError naming the file (exit code 2 at
start-up, the running configuration kept on reload), and aliases cannot expand without bound."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tableservice.cli import main
from tableservice.config import load_config
from tableservice.errors import ConfigError
from tableservice.executors.spark import SparkExecutor, SparkSettings
from tableservice.service.daemon import Daemon
from tests.support.daemon_helpers import config_text

GOOD = "service:\n  poll_interval_seconds: 7\n"

# About 400 bytes; expanded, nine to the ninth strings.
BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)


def _write(tmp_path: Path, text: str | bytes) -> Path:
    cfg = tmp_path / "cfg.yaml"
    if isinstance(text, bytes):
        cfg.write_bytes(text)
    else:
        cfg.write_text(text)
    return cfg


def test_a_control_character_is_a_config_error_naming_file_line_and_column(tmp_path: Path) -> None:
    cfg = _write(tmp_path, GOOD + "# edited \x07\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(cfg), env={})
    assert type(info.value) is ConfigError
    assert info.value.path == str(cfg)
    assert "line 3, column 10" in info.value.problem
    assert "0x0007" in info.value.problem


def test_an_alias_bomb_is_refused(tmp_path: Path) -> None:
    assert len(BOMB) < 500
    cfg = _write(tmp_path, BOMB)
    with pytest.raises(ConfigError, match="aliases expand to more than") as info:
        load_config(str(cfg), env={})
    assert info.value.path == str(cfg)


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    cfg = _write(tmp_path, "service: &s\n  poll_interval_seconds: 7\n  again: *s\n")
    with pytest.raises(ConfigError, match="line 1, column 10: an alias refers to a node that contains it"):
        load_config(str(cfg), env={})


def test_deep_nesting_is_a_config_error(tmp_path: Path) -> None:
    cfg = _write(tmp_path, "service: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="nested too deeply") as info:
        load_config(str(cfg), env={})
    assert info.value.path == str(cfg)


def test_modest_aliases_and_merge_keys_still_load(tmp_path: Path) -> None:
    text = (
        "tables:\n"
        "  - uri: /data/a\n"
        "    policy: &p\n"
        "      compaction: {hoodie.compact.inline.max.delta.commits: 9}\n"
        "  - uri: /data/b\n"
        "    policy: *p\n"
        "service:\n"
        "  retry: &r {initial_backoff_seconds: 3, max_backoff_seconds: 9}\n"
        "  http:\n"
        "    <<: {host: 127.0.0.2}\n"
        "    port: 0\n"
    )
    config = load_config(str(_write(tmp_path, text)), env={})
    assert [t.uri for t in config.tables] == ["/data/a", "/data/b"]
    assert config.tables[0].policy == config.tables[1].policy
    assert config.service.http.host == "127.0.0.2"


@pytest.mark.parametrize(
    ("case", "text"),
    [("control character", GOOD + "# edited \x07\n"), ("alias bomb", BOMB), ("not utf-8", b"service: \xff\n")],
)
@pytest.mark.parametrize("command", ["once", "run"])
def test_cli_exits_2_naming_the_file(
    case: str, text: str | bytes, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _write(tmp_path, text)
    assert main([command, "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("bad", [GOOD + "# edited \x07\n", BOMB])
def test_reload_keeps_the_running_configuration(bad: str, tmp_path: Path) -> None:
    cfg = _write(tmp_path, config_text([], poll=7))
    daemon = Daemon(str(cfg), load_config(str(cfg)), executor=SparkExecutor(SparkSettings()))
    running = daemon.config
    cfg.write_text(bad)

    async def reload() -> None:
        async with anyio.create_task_group() as tg:
            await daemon._reload(tg)

    anyio.run(reload)
    assert daemon.config is running
    assert daemon.config.service.poll_interval_seconds == 7
    text = daemon.metrics.render()[0].decode()
    assert 'tableservice_config_reloads_total{result="failure"} 1.0' in text
    assert "tableservice_config_last_reload_successful 0.0" in text


def test_reload_applies_new_log_settings(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A reload that changes `service.log` hands the new level and format to the process's logging (the CLI's
    handler); a new `spark_level` is reported as taking effect at the next restart."""
    cfg = _write(tmp_path, config_text([], poll=7))
    applied: list[tuple[str, str]] = []
    daemon = Daemon(
        str(cfg),
        load_config(str(cfg)),
        executor=SparkExecutor(SparkSettings()),
        on_log_settings=lambda log: applied.append((log.level, log.format)),
    )
    before = (daemon.config.service.log.level, daemon.config.service.log.format)
    edited = config_text([], poll=7).replace(
        "log: {level: INFO}", "log: {level: DEBUG, format: json, spark_level: ERROR}"
    )
    cfg.write_text(edited)

    async def reload() -> None:
        async with anyio.create_task_group() as tg:
            await daemon._reload(tg)

    with caplog.at_level("INFO", logger="tableservice.service.daemon"):
        anyio.run(reload)
    assert before != ("DEBUG", "json")
    assert applied == [("DEBUG", "json")]
    assert "spark_level ERROR takes effect when the daemon restarts" in caplog.text
    anyio.run(reload)  # the same file again: nothing changes, nothing is applied again
    assert applied == [("DEBUG", "json")]
