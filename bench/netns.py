"""Hosts in network namespaces of their own, joined by a bridge: MinIO and kvtierd nodes on one
machine, each behind a link that can be rate-limited, made lossy or cut. Used by
bench/fleet_bench.py and python/tests/test_network_faults.py.

The kernels here are built without netem (CONFIG_NET_SCH_NETEM), so a slow link is a token
bucket (tc tbf) and loss is nftables dropping packets at random. Needs root, ``ip`` and ``tc``
(``nft`` for loss); `missing()` says what is absent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from minio_peer import minio_command, minio_env, minio_path

SUBNET = "10.77.0"
MINIO_USER, MINIO_PASSWORD = "kvtier-test", "kvtier-test-secret"


def run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


def missing(tools: tuple[str, ...] = ("ip", "tc", "nft")) -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in tools:
        if shutil.which(tool) is None:
            return f"no {tool} (iproute2, nftables)"
    return None


def wait_for(condition: Callable[[], bool], what: str, deadline_s: float = 60.0) -> None:
    """Polls `condition` (a state of another process) until it holds, within `deadline_s`."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {deadline_s} s")
        time.sleep(0.05)  # Polling a condition in another process, bounded.


@dataclass
class Network:
    """A bridge in namespace ``sw`` and hosts added with `add_host`. Use as a context manager:
    leaving it kills the processes it spawned and deletes its namespaces."""

    tag: str
    dir: Path
    namespaces: list[str] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __enter__(self) -> Network:
        try:
            run("ip", "netns", "add", self.ns("sw"))
            self.namespaces.append(self.ns("sw"))
            run("ip", "-n", self.ns("sw"), "link", "add", "br0", "type", "bridge")
            run("ip", "-n", self.ns("sw"), "link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()
        self.procs.clear()
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.namespaces.clear()

    def ns(self, name: str) -> str:
        return f"kvt{name}{self.tag}"

    def veth(self, name: str) -> str:
        return f"kv{name}{self.tag}"[:15]

    def add_host(self, name: str, octet: int) -> str:
        """A namespace with one veth to the bridge; returns its address, SUBNET.octet."""
        ns, inside, outside = self.ns(name), self.veth(name), self.veth(name + "p")
        run("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        run("ip", "-n", ns, "link", "set", "lo", "up")
        run(
            *("ip", "link", "add", inside, "netns", ns, "type", "veth"),
            *("peer", "name", outside, "netns", self.ns("sw")),
        )
        run("ip", "-n", self.ns("sw"), "link", "set", outside, "master", "br0", "up")
        run("ip", "-n", ns, "addr", "add", f"{SUBNET}.{octet}/24", "dev", inside)
        run("ip", "-n", ns, "link", "set", inside, "up")
        return f"{SUBNET}.{octet}"

    def exec_argv(self, name: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns(name), *argv]

    def spawn(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, log: str = ""
    ) -> subprocess.Popen[bytes]:
        with open(self.dir / f"{log or name}.log", "ab") as out:
            proc = subprocess.Popen(
                self.exec_argv(name, argv),
                stdout=out,
                stderr=out,
                env={**os.environ, **(env or {})},
            )
        self.procs.append(proc)
        return proc

    def limit(self, name: str, rate: str, latency: str = "50ms") -> None:
        """A token bucket of `rate` (tc's units: "1gbit") on the host's link, both ways."""
        for ns, dev in ((self.ns(name), self.veth(name)), (self.ns("sw"), self.veth(name + "p"))):
            run(
                *("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root"),
                *("tbf", "rate", rate, "burst", "256kb", "latency", latency),
            )

    def slow_and_lossy(self, name: str) -> None:
        """2 Mbit/s out of the host, and 30% of its packets dropped."""
        exec_ = ("ip", "netns", "exec", self.ns(name))
        run(
            *exec_,
            *("tc", "qdisc", "replace", "dev", self.veth(name), "root"),
            *("tbf", "rate", "2mbit", "burst", "32kbit", "latency", "400ms"),
        )
        run(*exec_, "nft", "add", "table", "inet", "faults")
        run(
            *exec_,
            *("nft", "add", "chain", "inet", "faults", "out"),
            "{ type filter hook output priority 0; }",
        )
        run(
            *exec_,
            *("nft", "add", "rule", "inet", "faults", "out"),
            *("meta", "random", "<", str(int(0.3 * 2**32)), "drop"),
        )

    def heal(self, name: str) -> None:
        exec_ = ("ip", "netns", "exec", self.ns(name))
        run(*exec_, "tc", "qdisc", "del", "dev", self.veth(name), "root")
        run(*exec_, "nft", "delete", "table", "inet", "faults")

    def link(self, name: str, up: bool) -> None:
        run("ip", "-n", self.ns(name), "link", "set", self.veth(name), "up" if up else "down")

    def start_minio(self, name: str, address: str, data: Path, buckets: list[str]) -> str:
        """MinIO serving `data` at address:9000 from host `name`; returns its endpoint URL once
        it answers its readiness probe."""
        minio = minio_path()
        if minio is None:
            raise FileNotFoundError("no minio (scripts/test builds it, or set KVTIER_MINIO)")
        for bucket in buckets:  # MinIO serves each top-level directory as a bucket.
            (data / bucket).mkdir(parents=True, exist_ok=True)
        self.spawn(
            name,
            minio_command(minio, data, f"{address}:9000", f"{address}:9001") + ["--quiet"],
            minio_env(MINIO_USER, MINIO_PASSWORD),
        )
        url = f"http://{address}:9000"
        probe = self.exec_argv(
            name, ["curl", "-sf", "-o", "/dev/null", f"{url}/minio/health/ready"]
        )
        wait_for(lambda: subprocess.run(probe, capture_output=True).returncode == 0, "MinIO")
        return url
