"""Fixtures: a real kvtierd on free loopback ports with a private data directory.

The daemon binary comes from $KVTIERD, else the release build (scripts/test builds it). Readiness
is the port file kvtierd writes once it serves; waits are bounded and reaching a bound fails.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 60.0


def kvtierd_path() -> str:
    path = os.environ.get("KVTIERD") or str(ROOT / "build/release/src/server/kvtierd")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no kvtierd at {path}: build it (scripts/test does) or set KVTIERD")
    return path


def kvtier_cli_path() -> str:
    """The kvtier CLI: $KVTIER_CLI, else beside $KVTIERD's build, else the release build."""
    path = os.environ.get("KVTIER_CLI")
    if not path:
        daemon = Path(kvtierd_path()).resolve()
        path = str(daemon.parents[2] / "tools/kvtier")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no kvtier CLI at {path}: build it (scripts/test does) or set KVTIER_CLI")
    return path


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Polls `condition` (a state of another process) until it holds, within DEADLINE."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {DEADLINE} s"
        time.sleep(0.05)  # Polling a condition in another process, bounded.


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    """A kvtierd of its own. Tenants: ``default`` (anonymous local clients), ``acme`` (token
    ``acme-token``; S3 key pair ``AKIDACME`` / ``acme-s3-secret``) and ``other`` (token
    ``other-token``; ``AKIDOTHER`` / ``other-s3-secret``). The S3 endpoint is off unless
    ``extra`` has an [s3] table."""

    def __init__(self, directory: Path, extra: str = "", memory: str = "256MiB") -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = self.dir / "kvtierd.toml"
        self.config.write_text(
            f'data_dir = "{self.dir}"\n'
            "[server]\n"
            'native_listen = "127.0.0.1:0"\n'
            'resp_listen = "127.0.0.1:0"\n'
            'http_listen = "127.0.0.1:0"\n'
            'unix_socket = "kvtierd.sock"\n'
            "threads = 2\n"
            f"{extra}\n"
            "[memory]\n"
            f'capacity = "{memory}"\n'
            "[[tenants]]\n"
            'name = "default"\n'
            "[[tenants]]\n"
            'name = "acme"\n'
            'token = "acme-token"\n'
            's3_access_key = "AKIDACME"\n'
            's3_secret_key = "acme-s3-secret"\n'
            "[[tenants]]\n"
            'name = "other"\n'
            'token = "other-token"\n'
            's3_access_key = "AKIDOTHER"\n'
            's3_secret_key = "other-s3-secret"\n'
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, str] = {}
        try:
            self.start()
        except BaseException:
            # Its fixture never gets to close it: nothing may stay behind.
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            remove_arena_files("", self.dir)
            raise

    def start(self, take_over: bool = False) -> None:
        port_file = self.dir / "ports"
        port_file.unlink(missing_ok=True)
        with open(self.dir / "kvtierd.log", "ab") as log:
            self.proc = subprocess.Popen(
                [kvtierd_path(), "--config", str(self.config), "--port-file", str(port_file)]
                + (["--take-over"] if take_over else []),
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + DEADLINE
        while not port_file.exists():
            if self.proc.poll() is not None:
                pytest.fail(
                    f"kvtierd exited during start-up: {(self.dir / 'kvtierd.log').read_text()}"
                )
            if time.monotonic() > deadline:
                pytest.fail("kvtierd did not start")
            time.sleep(0.005)  # Polling for readiness, bounded by DEADLINE.
        self.ports = dict(line.split("=", 1) for line in port_file.read_text().split())

    def upgrade(self) -> int:
        """A rolling upgrade: a second kvtierd takes over (``--take-over``); returns once it
        serves and the old one has exited, with the old one's exit code."""
        assert self.proc is not None
        old = self.proc
        self.start(take_over=True)
        return old.wait(timeout=DEADLINE)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=DEADLINE)
        self.proc = None
        return code

    def pause(self) -> None:
        """SIGSTOP, and waits until every thread of kvtierd has stopped (signals are delivered
        asynchronously)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        tasks = Path(f"/proc/{self.proc.pid}/task")

        def stopped(task: Path) -> bool:
            try:
                return (task / "stat").read_text().rsplit(")", 1)[1].split()[0] in ("t", "T")
            except FileNotFoundError:  # The thread has exited.
                return True

        deadline = time.monotonic() + DEADLINE
        while not all(stopped(t) for t in tasks.iterdir()):
            assert time.monotonic() < deadline, "kvtierd did not stop"
            time.sleep(0.001)  # Polling the threads' states, bounded.

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def unix_url(self) -> str:
        return "unix://" + self.ports["unix_socket"]

    @property
    def socket_path(self) -> str:
        return self.ports["unix_socket"]

    @property
    def tcp_url(self) -> str:
        return f"tcp://127.0.0.1:{self.ports['native_port']}"

    @property
    def resp_port(self) -> int:
        return int(self.ports["resp_port"])

    @property
    def s3_port(self) -> int:
        return int(self.ports["s3_port"])

    @property
    def http_port(self) -> int:
        return int(self.ports["http_port"])

    def metrics(self) -> dict[str, float]:
        """Every sample of /metrics, by name with its labels (``name{a="b"}``)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics") as r:
            text = r.read().decode()
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                samples[name] = float(value)
        return samples

    def close(self) -> None:
        try:
            if self.proc is not None:
                self.proc.send_signal(signal.SIGCONT)
                assert self.stop() == 0, "kvtierd did not shut down cleanly"
        finally:
            # G2 stays in its files on /dev/shm for a warm restart (the arena file and arena.*:
            # the tenants' regions, the index, the lock): a test's daemon has none coming.
            remove_arena_files(self.ports.get("g2_arena_file", ""), self.dir)


def remove_arena_files(arena: str, data_dir: Path | None = None) -> None:
    """Removes G2's files of a kvtierd that has stopped: the arena file and arena.*, and those
    of every arena in /dev/shm whose lock names `data_dir` as its owner (a kvtierd that failed
    or was killed before it wrote its port file)."""
    arenas = [Path(arena)] if arena else []
    if data_dir is not None:
        owner = f"data_dir={data_dir.resolve()}\n"
        for lock in Path("/dev/shm").glob("kvtier-g2-*.lock"):
            try:
                if lock.read_text(errors="replace").endswith(owner):
                    arenas.append(lock.with_suffix(""))
            except FileNotFoundError:  # Removed meanwhile.
                continue
    for path in arenas:
        for p in [path, *path.parent.glob(path.name + ".*")]:
            p.unlink(missing_ok=True)


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost and its key, made by openssl in `directory`."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
        + ["-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost"]
        + ["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path / "kvtierd")
    yield d
    d.close()


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[type[Daemon]]:
    """Starts daemons with extra configuration: ``make_daemon(extra="[disk]\\n...")``."""
    started: list[Daemon] = []

    def make(extra: str = "", memory: str = "256MiB") -> Daemon:
        d = Daemon(tmp_path / f"kvtierd{len(started)}", extra, memory)
        started.append(d)
        return d

    yield make  # type: ignore[misc]
    for d in started:
        d.close()
