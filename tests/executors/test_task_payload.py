"""What a Spark job ships: tasks carry no credentials (executors take them from their own environment)."""

from __future__ import annotations

import json

from tableservice.executors.spark import task_payload
from tableservice.hudi.action.compact import CompactionTask
from tableservice.hudi.action.tasks import task_from_json
from tableservice.storage import StorageOptions


def test_tasks_shipped_to_spark_carry_no_credentials() -> None:
    task = CompactionTask(
        table_name="trips",
        base_path="s3://bucket/trips",
        table_version=9,
        properties={"hoodie.table.name": "trips"},
        avro_schema={"type": "record", "name": "r", "fields": []},
        instant_time="20261123000000000",
        partition_path="city=chennai",
        file_id="fg-0",
        base_instant_time="20261122000000000",
        base_file=None,
        log_files=(".fg-0_20261122000000000.log.1_0-1-0",),
        completed_instants=("20261122000000000",),
        timeline_start="20261122000000000",
    )
    options = StorageOptions(
        endpoint_url="http://127.0.0.1:9000",
        region="eu-west-1",
        access_key_id="AKIAEXAMPLEKEYID",
        secret_access_key="wJalrXUtnFEMI-secret-value",
        session_token="FwoGZXIvYXdzE-session-token",
    )
    payload = task_payload([task], options)
    text = "".join(payload)
    for secret in ("AKIAEXAMPLEKEYID", "wJalrXUtnFEMI-secret-value", "FwoGZXIvYXdzE-session-token"):
        assert secret not in text
    shipped = task_from_json(payload[0])
    assert json.loads(shipped.extra["storage_options"]) == {
        "endpoint_url": "http://127.0.0.1:9000",
        "region": "eu-west-1",
    }
    assert shipped == task.__class__(**{**task.__dict__, "extra": shipped.extra})
