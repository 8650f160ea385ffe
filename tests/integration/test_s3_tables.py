"""Tables on S3 (moto in server mode on loopback): written by our client, read by us and by hudi-rs."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from tableservice.hudi.table.config import TableType
from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.table.read import ReadOptions, read
from tableservice.hudi.write.client import WriteClient, WriteOptions
from tableservice.hudi.write.workload import Workload
from tableservice.storage import Storage
from tests.support.oracle import assert_same_rows, sort_rows
from tests.support.servers import MotoServer
from tests.support.trip_tables import create_trip_table

pytestmark = [pytest.mark.moto, pytest.mark.oracle]


def _hudi_rs_read(uri: str, moto: MotoServer, as_of: str | None = None) -> pa.Table:
    from hudi import HudiReadOptions, HudiTableBuilder

    options: dict[str, Any] = {
        "aws_endpoint_url": moto.endpoint_url,
        "aws_allow_http": "true",
        "aws_access_key_id": moto.access_key_id,
        "aws_secret_access_key": moto.secret_access_key,
        "aws_region": moto.region,
    }
    table = HudiTableBuilder.from_base_uri(uri).with_storage_options(options).build()
    opts = HudiReadOptions()
    if as_of is not None:
        opts = opts.with_as_of_timestamp(as_of)
    batches = table.read(opts)
    return sort_rows(pa.Table.from_batches(batches))


@pytest.mark.parametrize("version", [6, 9])
def test_mor_table_on_s3(version: int, s3_bucket: tuple[Storage, str], moto: MotoServer) -> None:
    storage, root = s3_bucket
    uri = f"{root}/trips_v{version}"
    create_trip_table(uri, version, TableType.MERGE_ON_READ, name="trips", storage=storage)
    client = WriteClient(storage, uri, options=WriteOptions(max_file_records=100))
    instants = [client.apply(step).instant_time for step in Workload(300, 3, 0.3, 0.05, partitions=2).steps()]
    table = HudiTable.open(storage, uri)
    assert [i.requested_time for i in table.timeline().completed()] == instants
    ours = read(table)
    assert ours.num_rows == 300 - 2 * 15
    assert_same_rows(ours, _hudi_rs_read(uri, moto), "S3 snapshot")
    assert_same_rows(read(table, ReadOptions(as_of=instants[0])), _hudi_rs_read(uri, moto, instants[0]), "as of")
    # s3a:// URIs, as Hudi's Java writers spell them, name the same table.
    assert_same_rows(read(HudiTable.open(storage, uri.replace("s3://", "s3a://"))), ours, "s3a")


@pytest.mark.spark
def test_compaction_on_s3_runs_on_spark_without_shipping_credentials(
    s3_bucket: tuple[Storage, str], moto: MotoServer, spark_executor: Any
) -> None:
    """The driver's storage options hold credentials; the tasks carry only the endpoint and region, and the Spark
    workers reach the bucket with credentials from their own environment."""
    from tableservice.locks import InProcessLockProvider
    from tableservice.planning.compaction.policy import CompactionPolicy
    from tableservice.service.actions import TableContext
    from tableservice.service.compaction import execute_compaction, schedule_compaction

    storage, root = s3_bucket
    uri = f"{root}/trips_compacted"
    create_trip_table(uri, 9, TableType.MERGE_ON_READ, name="trips", storage=storage)
    client = WriteClient(storage, uri, options=WriteOptions(max_file_records=100))
    for step in Workload(300, 3, 0.3, 0.05, partitions=2).steps():
        client.apply(step)
    before = _hudi_rs_read(uri, moto)
    table = HudiTable.open(storage, uri)
    assert storage.options.secret_access_key  # the driver holds credentials
    ctx = TableContext(
        table=table,
        lock=InProcessLockProvider().table_lock("trips", uri),
        executor=spark_executor,
        storage_options=storage.options,
    )
    scheduled = schedule_compaction(ctx, CompactionPolicy(), force=True)
    assert scheduled is not None
    done = execute_compaction(ctx, scheduled.requested_time)
    assert done.instant.is_completed and done.stats
    assert all(s.path and not s.path.endswith(".log") for s in done.stats)
    after = _hudi_rs_read(uri, moto)
    drop = ["_hoodie_file_name"]  # the rows moved into the new base files
    assert_same_rows(after.drop_columns(drop), before.drop_columns(drop), "S3 snapshot after compaction")
