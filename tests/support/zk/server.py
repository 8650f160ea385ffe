"""Debian's ZooKeeper server and Apache Curator, driven from tests.

`ZooKeeperServer` runs a standalone server (`ZooKeeperServerMain`) on 127.0.0.1 with a temp data dir;
`CuratorProcess` compiles and runs tests/zk/CuratorContender.java against Debian's Curator jars.
The jars are found with `dpkg -L` (Debian's `zookeeper`/`libzookeeper-java`, `libcurator-*-java`).
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONTENDER_SOURCE = HERE / "CuratorContender.java"
JVM_FLAGS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true"]

# (Debian package, jar name under /usr/share/java)
SERVER_JARS = [
    ("libzookeeper-java", "zookeeper"),
    ("libzookeeper-java", "zookeeper-jute"),
    ("libslf4j-java", "slf4j-api"),
    ("libslf4j-java", "slf4j-simple"),
]
CURATOR_JARS = [
    ("libcurator-recipes-java", "curator-recipes"),
    ("libcurator-framework-java", "curator-framework"),
    ("libcurator-client-java", "curator-client"),
    ("libzookeeper-java", "zookeeper"),
    ("libzookeeper-java", "zookeeper-jute"),
    ("libguava-java", "guava"),
    ("libslf4j-java", "slf4j-api"),
    ("libslf4j-java", "slf4j-nop"),
]


def debian_jar(package: str, name: str) -> Path | None:
    """`/usr/share/java/<name>.jar` as listed by `dpkg -L <package>` (or present without dpkg)."""
    listing = ""
    with contextlib.suppress(OSError):
        listing = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, check=False).stdout
    for line in listing.splitlines():
        if line.endswith(f"/java/{name}.jar") and Path(line).is_file():
            return Path(line)
    fallback = Path("/usr/share/java") / f"{name}.jar"
    return fallback if fallback.is_file() else None


def classpath(jars: list[tuple[str, str]]) -> str:
    paths = [debian_jar(package, name) for package, name in jars]
    missing = [name for (_, name), path in zip(jars, paths, strict=True) if path is None]
    if missing:
        raise FileNotFoundError(f"jars not installed: {', '.join(missing)}")
    return os.pathsep.join(str(p) for p in paths)


def unavailable() -> str | None:
    """Why the real ZooKeeper/Curator tests cannot run here, or None."""
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            return f"{tool} not found (install openjdk-17-jdk-headless)"
    for package, name in SERVER_JARS + CURATOR_JARS:
        if debian_jar(package, name) is None:
            return f"{name}.jar not found (apt-get install -y zookeeper libcurator-recipes-java)"
    try:
        import kazoo  # noqa: F401
    except ImportError:
        return "kazoo is not installed (pip install -e '.[service]')"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def four_letter(port: int, word: str, timeout: float = 2.0) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        chunks = []
        while chunk := s.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


class ZooKeeperServer:
    """A standalone ZooKeeper on 127.0.0.1; keeps its port and data dir across stop()/start()."""

    def __init__(self, workdir: Path, tick_ms: int = 200) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.tick_ms = tick_ms
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "zookeeper.log"
        (workdir / "data").mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / "zoo.cfg"
        self.config_path.write_text(
            "\n".join(
                [
                    f"tickTime={tick_ms}",
                    f"dataDir={workdir / 'data'}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    "maxClientCnxns=0",
                    f"minSessionTimeout={2 * tick_ms}",
                    "maxSessionTimeout=120000",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,cons",
                    "",
                ]
            )
        )

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        cmd = [
            "java",
            *JVM_FLAGS,
            "-Dzookeeper.admin.enableServer=false",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            classpath(SERVER_JARS),
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(self.config_path),
        ]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}: {self.log_tail()}")
            with contextlib.suppress(OSError):
                if four_letter(self.port, "ruok") == "imok":
                    return
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"ZooKeeper not serving on {self.connect_string} after {timeout}s: {self.log_tail()}")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


def compile_contender(dest: Path) -> str:
    """Compile CuratorContender.java into `dest`; returns the classpath to run it with."""
    cp = classpath(CURATOR_JARS)
    done = subprocess.run(
        ["javac", "-nowarn", "-cp", cp, "-d", str(dest), str(CONTENDER_SOURCE)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"javac failed: {done.stderr[-3000:]}")
    return os.pathsep.join([str(dest), cp])


class CuratorProcess:
    """A running CuratorContender: send a command line, read its one-line answer."""

    def __init__(self, run_classpath: str, connect_string: str, session_timeout_ms: int, stderr_path: Path) -> None:
        self._stderr = open(stderr_path, "ab")  # noqa: SIM115 - closed in close()
        self.stderr_path = stderr_path
        self.proc = subprocess.Popen(
            ["java", *JVM_FLAGS, "-cp", run_classpath, "CuratorContender", connect_string, str(session_timeout_ms)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        ready = self.read(60.0)
        if ready != "READY":
            self.close()
            raise RuntimeError(f"Curator contender did not start: {ready!r}")

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def read(self, timeout: float) -> str:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no answer from the Curator contender within {timeout}s") from None
        if line is None:
            raise RuntimeError(f"the Curator contender exited: {self.stderr_path.read_text(errors='replace')[-2000:]}")
        return line

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def command(self, command: str, timeout: float = 30.0) -> str:
        self.send(command)
        return self.read(timeout)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.send("quit")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._stderr.close()
