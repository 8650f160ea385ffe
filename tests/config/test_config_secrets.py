"""Credentials are refused wherever they hide in the configuration (keys of other stores, user-info and tokens in
URLs and connect strings), named by file and line without their value; they never reach errors or logs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tableservice.cli.logsetup import JsonFormatter, RedactingFormatter, TextFormatter
from tableservice.config import load_config
from tableservice.errors import ConfigError, LockError, StorageError, redact_url_credentials

ZK = "locks:\n  hoodie.write.lock.provider: zookeeper\n  hoodie.write.lock.zookeeper.base_path: /hudi\n"

# (what, the file's text, the key path named, its line, the secret that must not show)
SECRETS = [
    ("azure account key", "spark:\n  conf:\n    spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net: "
     "c2VjcmV0S2V5MQ==\n", "spark.conf.spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net", 3,
     "c2VjcmV0S2V5MQ"),
    ("azure SAS of a container", "spark:\n  conf:\n    spark.hadoop.fs.azure.sas.data.acct.blob.core.windows.net: "
     "sv=2022-11-02&sig=SaSsIgNaTuRe\n", "spark.conf.spark.hadoop.fs.azure.sas.data.acct.blob.core.windows.net", 3,
     "SaSsIgNaTuRe"),
    ("azure fixed SAS token", "spark:\n  conf:\n    fs.azure.sas.fixed.token: sig=FiXeDsAs\n",
     "spark.conf.fs.azure.sas.fixed.token", 3, "FiXeDsAs"),
    ("s3a encryption key", "spark:\n  conf:\n    spark.hadoop.fs.s3a.encryption.key: RW5jS2V5QmFzZTY0\n",
     "spark.conf.spark.hadoop.fs.s3a.encryption.key", 3, "RW5jS2V5QmFzZTY0"),
    ("s3a server-side encryption key",
     "spark:\n  app_name: x\n  conf:\n    spark.hadoop.fs.s3a.server-side-encryption.key: U3NlS2V5\n",
     "spark.conf.spark.hadoop.fs.s3a.server-side-encryption.key", 4, "U3NlS2V5"),
    ("s3a per-bucket encryption key", "spark:\n  conf:\n    spark.hadoop.fs.s3a.bucket.lake.encryption.key: QmtLZXk=\n",
     "spark.conf.spark.hadoop.fs.s3a.bucket.lake.encryption.key", 3, "QmtLZXk"),
    ("gcs private key", "spark:\n  conf:\n    spark.hadoop.fs.gs.auth.service.account.private.key: "
     "'-----BEGIN PRIVATE KEY-----GcSkEy'\n", "spark.conf.spark.hadoop.fs.gs.auth.service.account.private.key", 3,
     "GcSkEy"),
    ("gcs private key id", "spark:\n  conf:\n    spark.hadoop.fs.gs.auth.service.account.private.key.id: 0a1b2c3d\n",
     "spark.conf.spark.hadoop.fs.gs.auth.service.account.private.key.id", 3, "0a1b2c3d"),
    ("endpoint user-info", "service:\n  poll_jitter: 0.1\nstorage:\n  endpoint_url: "
     "http://AKIAABCDEFGHIJKLMNOP:wJalrXUtnFEMIK7MDENG@minio:9000\n", "storage.endpoint_url", 4,
     "wJalrXUtnFEMIK7MDENG"),
    ("zookeeper connect string with user-info", ZK + "  hoodie.write.lock.zookeeper.url: zkops:ZkPaSsWoRd@zk-0:2181,"
     "zk-1:2181\n", "locks.hoodie.write.lock.zookeeper.url", 4, "ZkPaSsWoRd"),
    ("zookeeper user-info on a later host", "tables:\n  - uri: /data/t\n    locks:\n      "
     "hoodie.write.lock.zookeeper.url: zk-0:2181,zkops:ZkPaSs2@zk-1:2181\n",
     "tables[0].locks.hoodie.write.lock.zookeeper.url", 4, "ZkPaSs2"),
    ("spark connect token", "spark:\n  remote: sc://spark:15002/;user_id=ops;token=SpArKtOkEn\n", "spark.remote", 2,
     "SpArKtOkEn"),
    ("user-info in a spark conf URL", "spark:\n  conf:\n    spark.hadoop.fs.s3a.endpoint: https://u:CoNfPw@s3.local\n",
     "spark.conf.spark.hadoop.fs.s3a.endpoint", 3, "CoNfPw"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "key", "line", "secret"), [c[1:] for c in SECRETS], ids=[c[0] for c in SECRETS])
def test_secret_refused_by_file_and_line_without_its_value(
    tmp_path: Path, text: str, key: str, line: int, secret: str
) -> None:
    path = tmp_path / "daemon.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(str(path), env={})
    message = str(err.value)
    assert message.startswith(f"{key} (line {line}): ")
    assert "never go in the configuration file" in message
    assert message.endswith(f"| file={path}")
    assert secret not in message and secret[:4] not in message


def test_secret_from_an_environment_override_names_the_variable(tmp_path: Path) -> None:
    path = tmp_path / "daemon.yaml"
    path.write_text("storage:\n  region: eu-west-1\n")
    env = {"TABLESERVICE__STORAGE__ENDPOINT_URL": "https://ops:EnVpAsS@minio:9000"}
    with pytest.raises(ConfigError) as err:
        load_config(str(path), env=env)
    assert "environment variable TABLESERVICE__STORAGE__ENDPOINT_URL" in str(err.value)
    assert "EnVpAsS" not in str(err.value)


def test_clean_urls_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "daemon.yaml"
    path.write_text(
        ZK + "  hoodie.write.lock.zookeeper.url: zk-0:2181,zk-1:2181/chroot\n"
        "storage:\n  endpoint_url: http://minio:9000\n"
        "spark:\n  remote: sc://spark:15002/;user_id=ops\n  conf:\n"
        "    spark.hadoop.fs.azure.sas.token.provider.type: org.example.SasProvider\n"
        "    spark.kubernetes.container.image: registry.local:5000/tableservice@sha256:0123abcd\n"
    )
    config = load_config(str(path), env={})
    assert config.storage.endpoint_url == "http://minio:9000"
    assert config.spark.remote == "sc://spark:15002/;user_id=ops"
    assert config.locks.zookeeper_connect_string() == "zk-0:2181,zk-1:2181/chroot"
    assert config.spark.conf["spark.hadoop.fs.azure.sas.token.provider.type"] == "org.example.SasProvider"


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (
            "not connected to ZooKeeper at zkops:ZkPw@zk-0:2181,zk-1:2181",
            "not connected to ZooKeeper at ***@zk-0:2181,zk-1:2181",
        ),
        ("endpoint http://AKIAABCDEFGHIJKLMNOP:SeCr@minio:9000 refused", "endpoint http://***@minio:9000 refused"),
        ("session on sc://spark:15002/;token=ToK;user_id=a", "session on sc://spark:15002/;token=***;user_id=a"),
        ("GET https://h/x?a=1&token=ToK2 failed", "GET https://h/x?a=1&token=*** failed"),
    ],
)
def test_url_credentials_never_reach_errors_or_logs(text: str, masked: str) -> None:
    assert redact_url_credentials(text) == masked
    for error in (LockError(text, table="t"), StorageError("x", path=text)):
        assert masked in str(error)
    record = logging.LogRecord("tableservice.test", logging.WARNING, __file__, 1, "%s", (text,), None)
    for formatter in (TextFormatter(), RedactingFormatter("%(message)s")):
        assert masked in formatter.format(record)
    assert json.loads(JsonFormatter().format(record))["message"] == masked


def test_ordinary_text_is_left_alone() -> None:
    for text in ("registry:5000/img@sha256:abc", "ops@example.com", "spark://master:7077", "/data/t/city=x/f.parquet"):
        assert redact_url_credentials(text) == text
