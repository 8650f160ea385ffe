from __future__ import annotations

import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

import tableservice
from tableservice.metrics import ACTION_DURATION_BUCKETS, Metrics

Key = tuple[str, tuple[tuple[str, str], ...]]


def samples(metrics: Metrics, accept: str | None = None) -> dict[Key, float]:
    """Every sample of the exposition as {(sample name, sorted labels): value}."""
    body, _ = metrics.render(accept)
    out: dict[Key, float] = {}
    for family in text_string_to_metric_families(body.decode("utf-8")):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in out, f"duplicate series {key}"
            out[key] = sample.value
    return out


def families(metrics: Metrics) -> dict[str, str]:
    body, _ = metrics.render()
    return {family.name: family.type for family in text_string_to_metric_families(body.decode("utf-8"))}


def key(name: str, **labels: str) -> Key:
    return name, tuple(sorted(labels.items()))


def fresh() -> Metrics:
    return Metrics(CollectorRegistry(), version="9.9.9")


def test_family_names_and_types() -> None:
    assert families(fresh()) == {
        "tableservice_pending_actions": "gauge",
        "tableservice_oldest_pending_age_seconds": "gauge",
        "tableservice_actions_scheduled": "counter",
        "tableservice_actions_completed": "counter",
        "tableservice_actions_failed": "counter",
        "tableservice_actions_abandoned": "counter",
        "tableservice_actions_held_back": "gauge",
        "tableservice_action_duration_seconds": "histogram",
        "tableservice_read_bytes": "counter",
        "tableservice_written_bytes": "counter",
        "tableservice_read_records": "counter",
        "tableservice_written_records": "counter",
        "tableservice_log_files_compacted": "counter",
        "tableservice_lock_wait_seconds": "histogram",
        "tableservice_lock_hold_seconds": "histogram",
        "tableservice_poll_duration_seconds": "histogram",
        "tableservice_last_successful_poll_timestamp_seconds": "gauge",
        "tableservice_poll_lag_seconds": "gauge",
        "tableservice_storage_requests": "counter",
        "tableservice_table_errors": "counter",
        "tableservice_table_quarantined": "gauge",
        "tableservice_table_paused": "gauge",
        "tableservice_service_quarantined": "gauge",
        "tableservice_archived_instants": "counter",
        "tableservice_cleaned_bytes": "counter",
        "tableservice_cleaned_files": "counter",
        "tableservice_failed_writes_rolled_back": "counter",
        "tableservice_last_success_timestamp_seconds": "gauge",
        "tableservice_build_info": "gauge",
        "tableservice_up": "gauge",
        "tableservice_config_reloads": "counter",
        "tableservice_config_last_reload_successful": "gauge",
        "tableservice_spark_up": "gauge",
        "tableservice_leases_held": "gauge",
        "tableservice_spark_job_seconds": "histogram",
        "tableservice_history_write_failures": "counter",
        "tableservice_executor_seconds": "counter",
        "tableservice_action_requests": "counter",
        "tableservice_read_path_log_files_removed": "counter",
        "tableservice_read_path_log_bytes_removed": "counter",
        "tableservice_read_path_file_groups_before": "counter",
        "tableservice_read_path_file_groups_after": "counter",
        "tableservice_read_path_files_before": "counter",
        "tableservice_read_path_files_after": "counter",
        "tableservice_slo_compliant": "gauge",
        "tableservice_slo_time_to_breach_seconds": "gauge",
        "tableservice_slo_breaches": "counter",
    }


def test_build_info_and_up() -> None:
    metrics = Metrics(CollectorRegistry())
    got = samples(metrics)
    build = [(labels, value) for (name, labels), value in got.items() if name == "tableservice_build_info"]
    assert len(build) == 1
    labels, value = build[0]
    assert dict(labels)["version"] == tableservice.__version__
    assert value == 1.0
    assert got[key("tableservice_up")] == 1.0
    metrics.set_up(False)
    assert samples(metrics)[key("tableservice_up")] == 0.0


def test_leases_held_and_spark_up() -> None:
    metrics = Metrics(CollectorRegistry())
    assert samples(metrics)[key("tableservice_spark_up")] == 0.0
    metrics.set_spark_up(True)
    metrics.lease_held("t", "compaction", True)
    metrics.lease_held("t", "compaction", True)
    metrics.lease_held("t", "compaction", False)
    got = samples(metrics)
    assert got[key("tableservice_spark_up")] == 1.0
    assert got[key("tableservice_leases_held", table="t", action="compaction")] == 1.0


def test_config_reloads_are_counted_by_result() -> None:
    metrics = Metrics(CollectorRegistry())
    got = samples(metrics)
    assert got[key("tableservice_config_reloads_total", result="failure")] == 0.0  # present from the start
    assert got[key("tableservice_config_last_reload_successful")] == 1.0
    metrics.config_reloaded(False)
    got = samples(metrics)
    assert got[key("tableservice_config_reloads_total", result="failure")] == 1.0
    assert got[key("tableservice_config_last_reload_successful")] == 0.0
    metrics.config_reloaded(True)
    got = samples(metrics)
    assert got[key("tableservice_config_reloads_total", result="success")] == 1.0
    assert got[key("tableservice_config_last_reload_successful")] == 1.0


def test_action_lifecycle_values() -> None:
    m = fresh()
    m.set_pending("trips", "compaction", count=3, oldest_age_seconds=125.5)
    m.set_pending("trips", "clean", count=0, oldest_age_seconds=999.0)
    m.action_scheduled("trips", "compaction")
    m.action_scheduled("trips", "compaction")
    m.action_completed("trips", "compaction", duration_seconds=42.0)
    m.action_completed("trips", "compaction", duration_seconds=4000.0)
    m.action_failed("trips", "clustering")
    m.action_abandoned("trips", "clustering")
    m.record_io("trips", "compaction", bytes_read=1000, bytes_written=700, records_read=50, records_written=40)
    m.record_io("trips", "compaction", bytes_read=24, log_files_compacted=6)
    got = samples(m)
    ta = {"table": "trips", "action": "compaction"}
    assert got[key("tableservice_pending_actions", **ta)] == 3.0
    assert got[key("tableservice_oldest_pending_age_seconds", **ta)] == 125.5
    # no pending instant: the age is 0 whatever the caller passed
    assert got[key("tableservice_pending_actions", table="trips", action="clean")] == 0.0
    assert got[key("tableservice_oldest_pending_age_seconds", table="trips", action="clean")] == 0.0
    assert got[key("tableservice_actions_scheduled_total", **ta)] == 2.0
    assert got[key("tableservice_actions_completed_total", **ta)] == 2.0
    assert got[key("tableservice_actions_failed_total", table="trips", action="clustering")] == 1.0
    assert got[key("tableservice_actions_abandoned_total", table="trips", action="clustering")] == 1.0
    assert got[key("tableservice_read_bytes_total", **ta)] == 1024.0
    assert got[key("tableservice_written_bytes_total", **ta)] == 700.0
    assert got[key("tableservice_read_records_total", **ta)] == 50.0
    assert got[key("tableservice_written_records_total", **ta)] == 40.0
    assert got[key("tableservice_log_files_compacted_total", **ta)] == 6.0
    assert got[key("tableservice_action_duration_seconds_count", **ta)] == 2.0
    assert got[key("tableservice_action_duration_seconds_sum", **ta)] == 4042.0
    assert got[key("tableservice_action_duration_seconds_bucket", le="30.0", **ta)] == 0.0
    assert got[key("tableservice_action_duration_seconds_bucket", le="120.0", **ta)] == 1.0
    assert got[key("tableservice_action_duration_seconds_bucket", le="3600.0", **ta)] == 1.0
    assert got[key("tableservice_action_duration_seconds_bucket", le="7200.0", **ta)] == 2.0
    assert got[key("tableservice_action_duration_seconds_bucket", le="+Inf", **ta)] == 2.0
    les = sorted(
        float(dict(labels)["le"])
        for (name, labels), _ in got.items()
        if name == "tableservice_action_duration_seconds_bucket" and dict(labels)["action"] == "compaction"
    )
    assert les == [*ACTION_DURATION_BUCKETS, float("inf")]
    # the classic text format carries no *_created series by default
    assert not [name for name, _ in got if name.endswith("_created")]


def test_locks_polls_and_table_health() -> None:
    m = Metrics(CollectorRegistry(), clock=lambda: 1_700_000_000.0)
    m.observe_lock_wait("trips", "zookeeper", 0.2)
    m.observe_lock_wait("trips", "zookeeper", 3.0)
    m.observe_lock_hold("trips", "zookeeper", 1.5)
    m.poll_finished("trips", duration_seconds=0.3, succeeded=True)
    m.poll_finished("trips", duration_seconds=2.0, succeeded=False)
    m.poll_finished("rides", duration_seconds=0.1, succeeded=True, finished_at=1_600_000_000.5)
    m.table_error("trips", TimeoutError("slow"))
    m.table_error("trips", TimeoutError("slower"))
    m.table_error("trips", "CorruptFileError")
    m.set_quarantined("trips", True)
    m.set_quarantined("rides", False)
    m.set_paused("trips", False)
    m.set_paused("rides", True)
    got = samples(m)
    tl = {"table": "trips", "lock": "zookeeper"}
    assert got[key("tableservice_lock_wait_seconds_count", **tl)] == 2.0
    assert got[key("tableservice_lock_wait_seconds_sum", **tl)] == pytest.approx(3.2)
    assert got[key("tableservice_lock_wait_seconds_bucket", le="0.1", **tl)] == 0.0
    assert got[key("tableservice_lock_wait_seconds_bucket", le="0.5", **tl)] == 1.0
    assert got[key("tableservice_lock_wait_seconds_bucket", le="1.0", **tl)] == 1.0
    assert got[key("tableservice_lock_wait_seconds_bucket", le="5.0", **tl)] == 2.0
    assert got[key("tableservice_lock_hold_seconds_count", **tl)] == 1.0
    assert got[key("tableservice_poll_duration_seconds_count", table="trips")] == 2.0
    assert got[key("tableservice_poll_duration_seconds_sum", table="trips")] == pytest.approx(2.3)
    assert got[key("tableservice_last_successful_poll_timestamp_seconds", table="trips")] == 1_700_000_000.0
    assert got[key("tableservice_last_successful_poll_timestamp_seconds", table="rides")] == 1_600_000_000.5
    assert got[key("tableservice_table_errors_total", table="trips", kind="TimeoutError")] == 2.0
    assert got[key("tableservice_table_errors_total", table="trips", kind="CorruptFileError")] == 1.0
    assert got[key("tableservice_table_quarantined", table="trips")] == 1.0
    assert got[key("tableservice_table_quarantined", table="rides")] == 0.0
    assert got[key("tableservice_table_paused", table="trips")] == 0.0
    assert got[key("tableservice_table_paused", table="rides")] == 1.0


def test_forget_table_removes_only_its_series() -> None:
    m = fresh()
    for table in ("trips", "rides"):
        m.set_pending(table, "compaction", count=1, oldest_age_seconds=5.0)
        m.action_completed(table, "compaction", duration_seconds=3.0)
        m.observe_lock_wait(table, "dynamodb", 0.01)
        m.poll_finished(table, duration_seconds=0.1, succeeded=True)
        m.table_error(table, ValueError())
        m.set_quarantined(table, False)
        m.record_io(table, "compaction", bytes_read=1)
    assert m.known_tables() == {"trips", "rides"}
    before = samples(m)
    m.forget_table("trips")
    after = samples(m)
    assert m.known_tables() == {"rides"}
    assert not [k for k in after if ("table", "trips") in k[1]]
    assert [k for k in before if ("table", "trips") in k[1]]  # there was something to forget
    assert {k: v for k, v in before.items() if ("table", "trips") not in k[1]} == after
    # the table may come back; its counters start again from zero
    m.action_completed("trips", "compaction", duration_seconds=1.0)
    again = samples(m)
    assert again[key("tableservice_actions_completed_total", table="trips", action="compaction")] == 1.0
    m.forget_table("never-seen")  # no-op


def test_separate_registries_do_not_interfere() -> None:
    a, b = fresh(), fresh()
    a.action_completed("trips", "clean", duration_seconds=1.0)
    a.action_completed("trips", "clean", duration_seconds=1.0)
    b.action_completed("trips", "clean", duration_seconds=1.0)
    b.set_up(False)
    ka = key("tableservice_actions_completed_total", table="trips", action="clean")
    assert samples(a)[ka] == 2.0
    assert samples(b)[ka] == 1.0
    assert samples(a)[key("tableservice_up")] == 1.0
    b.forget_table("trips")
    assert samples(a)[ka] == 2.0
    assert ka not in samples(b)
    # nothing leaks into prometheus_client's global registry
    assert REGISTRY.get_sample_value("tableservice_up") is None


def test_openmetrics_when_asked() -> None:
    m = fresh()
    m.action_completed("trips", "compaction", duration_seconds=2.0)
    body, content_type = m.render("application/openmetrics-text; version=1.0.0,text/plain;q=0.5")
    assert content_type.startswith("application/openmetrics-text")
    text = body.decode("utf-8")
    assert text.endswith("# EOF\n")
    assert 'tableservice_actions_completed_total{action="compaction",table="trips"} 1.0' in text
    assert "tableservice_actions_completed_created{" in text
    body, content_type = m.render("text/plain")
    assert content_type.startswith("text/plain")
    assert b"# EOF" not in body


def test_created_series_kept_on_request() -> None:
    m = Metrics(CollectorRegistry(), created_series=True)
    m.action_failed("trips", "rollback")
    got = samples(m)
    assert key("tableservice_actions_failed_created", table="trips", action="rollback") in got


def test_process_metrics_optional() -> None:
    with_process = Metrics(CollectorRegistry(), process_metrics=True)
    assert any(name.startswith("process_") for name in families(with_process))
    assert not any(name.startswith("process_") for name in families(fresh()))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.action_completed("t", "clean", duration_seconds=-1.0), "action_duration_seconds"),
        (lambda m: m.set_pending("t", "clean", count=-1, oldest_age_seconds=0.0), "pending_actions"),
        (lambda m: m.record_io("t", "clean", bytes_written=-5), "written_bytes_total"),
        (lambda m: m.observe_lock_hold("t", "zk", float("nan")), "lock_hold_seconds"),
        (lambda m: m.action_scheduled("", "clean"), "table"),
        (lambda m: m.action_scheduled("t", ""), "action"),
    ],
)
def test_bad_values_are_rejected(call: object, message: str) -> None:
    m = fresh()
    assert callable(call)
    with pytest.raises(ValueError, match=message):
        call(m)
    # a rejected record_io adds nothing at all
    assert not [k for k in samples(m) if ("table", "t") in k[1]]


def test_storage_requests_add_up_per_table_and_kind() -> None:
    m = fresh()
    m.storage_requests("trips", {"LIST": 1})
    m.storage_requests("trips", {"LIST": 2, "GET": 3, "PUT": 0})
    m.storage_requests("rides", {"HEAD": 1})
    m.poll_lag("trips", 1.5)
    got = samples(m)
    assert got[key("tableservice_storage_requests_total", table="trips", kind="LIST")] == 3.0
    assert got[key("tableservice_storage_requests_total", table="trips", kind="GET")] == 3.0
    assert key("tableservice_storage_requests_total", table="trips", kind="PUT") not in got
    assert got[key("tableservice_storage_requests_total", table="rides", kind="HEAD")] == 1.0
    assert got[key("tableservice_poll_lag_seconds", table="trips")] == 1.5
    m.forget_table("trips")
    assert key("tableservice_storage_requests_total", table="trips", kind="LIST") not in samples(m)
