"""Starting a kvtierd for a Python benchmark (bench/common.sh's `wait_kvtierd` is the wait for
the shell ones): its configuration written to a directory of its own, its log there, and the
wait until it serves and, when it takes G2's memory up front (`prefault = true`), has taken it
(its port file says `g2_provisioned=1`).

G2 takes that memory on a thread of its own while it already serves: a benchmark that started
measuring meanwhile would charge its first phase for clearing every page of G2 beside it."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import time
from pathlib import Path

# The line G2's provisioning thread logs when it is done (how much, how long), or when it gives up.
PROVISIONED = re.compile(
    r"G2: took (\d+) MiB of memory up front in (\d+) ms|G2: memory not taken up front"
)


def die_with_parent() -> None:
    """A ``preexec_fn`` for the servers a benchmark starts: the child gets SIGTERM when the
    benchmark dies, however it dies (a crash of its own included), so that no server outlives
    it to hold memory and cores under the next run's measurements."""
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds process `pid` has used, all its threads (a server's share of
    what a benchmark measured)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_ports(path: Path) -> dict[str, str]:
    """kvtierd's `--port-file`: native_port, resp_port, http_port, s3_port, unix_socket."""
    return dict(line.split("=", 1) for line in path.read_text().split())


def wait_ready(
    proc: subprocess.Popen[bytes], directory: Path, log: Path, seconds: float = 120
) -> dict[str, str]:
    """Waits until the kvtierd started with ``--port-file directory/ports`` and logging to
    ``log`` serves and has provisioned G2 (its port file says ``g2_provisioned=1``); returns its
    ports. Raises RuntimeError, with the log, when it exits or takes longer than ``seconds``."""
    ports = directory / "ports"
    deadline = time.monotonic() + seconds
    while not ports.exists() or read_ports(ports).get("g2_provisioned") != "1":
        if proc.poll() is not None or time.monotonic() > deadline:
            what = "G2 did not take its memory" if ports.exists() else "kvtierd did not start"
            raise RuntimeError(f"{what} in {directory}:\n{log.read_text(errors='replace')}")
        time.sleep(0.01)  # Polling a starting server, bounded by the deadline.
    return read_ports(ports)


def start(
    build: Path, directory: Path, toml: str, seconds: float = 120
) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """Writes ``toml`` to ``directory``/kvtierd.toml, starts ``build``'s kvtierd with it (its
    output in ``directory``/kvtierd.log) and waits as `wait_ready` does; returns the process,
    which the caller stops, and its ports."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kvtierd.toml").write_text(toml)
    log = directory / "kvtierd.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(build / "src/server/kvtierd"),
                "--config",
                str(directory / "kvtierd.toml"),
                "--port-file",
                str(directory / "ports"),
            ],
            stdout=out,
            stderr=out,
            preexec_fn=die_with_parent,
        )
    try:
        return proc, wait_ready(proc, directory, log, seconds)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
