"""Driver JVM flags for local masters: ours first, the user's after them (the JVM takes a flag's last value)."""

from __future__ import annotations

import pytest

from tableservice.executors.jvm_output import driver_conf
from tableservice.executors.spark import LOCAL_JAVA_OPTIONS, local_java_options

KEY = "spark.driver.extraJavaOptions"


@pytest.mark.parametrize("master", ["local", "local[1]", "local[2]", "local[*]", "local[4,2]"])
def test_local_masters_get_the_flags(master: str) -> None:
    got = local_java_options({"spark.master": master, "spark.app.name": "t"})
    assert got == {"spark.master": master, "spark.app.name": "t", KEY: LOCAL_JAVA_OPTIONS}


def test_user_flags_come_after_ours_and_log4j_after_both() -> None:
    user = "-XX:TieredStopAtLevel=1 -Dx=1"
    got = local_java_options({"spark.master": "local[2]", KEY: f" {user} "})
    assert got[KEY] == f"{LOCAL_JAVA_OPTIONS} {user}"
    final = driver_conf(got, "/tmp/log4j2.properties")[KEY]
    assert final == f"{LOCAL_JAVA_OPTIONS} {user} -Dlog4j2.configurationFile=/tmp/log4j2.properties"


@pytest.mark.parametrize("collector", ["-XX:+UseG1GC", "-XX:+UseParallelGC", "-XX:+UseZGC", "-XX:-UseSerialGC"])
def test_a_collector_the_user_chose_is_left_alone(collector: str) -> None:
    """The JVM refuses to start with two collectors ("Multiple garbage collectors selected")."""
    options = {"spark.master": "local[2]", KEY: f"-Xmx2g {collector}"}
    assert local_java_options(options) == options


@pytest.mark.parametrize("master", ["spark://host:7077", "yarn", "k8s://https://api:6443", "localhost"])
def test_other_masters_are_left_alone(master: str) -> None:
    options = {"spark.master": master, KEY: "-Dx=1"}
    assert local_java_options(options) == options
