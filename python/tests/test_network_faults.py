"""Network faults between two kvtierd and their shared S3 tier: MinIO and each kvtierd in a
network namespace of its own, joined by a bridge; node A's link made slow and lossy, then cut.
G4 calls end within their timeouts (nothing hangs, nothing wrong is served), the cut node
serves what its own tiers hold, and once the link is back it catches up on the deletions the
other node announced meanwhile.

The kernels here are built without netem (CONFIG_NET_SCH_NETEM), so a slow link is a token
bucket (tc tbf, 2 Mbit/s) and loss is nftables dropping 30% of A's packets at random.

Needs root, ``ip``, ``tc``, ``nft`` and MinIO (``scripts/test`` builds it into build/go/bin);
skips, saying which is missing, without them. The clients reach each kvtierd through its Unix
socket, which network namespaces do not separate.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import ROOT, kvtierd_path, wait_until

import kvtier

SUBNET = "10.77.0"
USER, PASSWORD = "kvtier-test", "kvtier-test-secret"
BUCKET = "kvtier-g4"


def run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


@dataclass
class Network:
    tag: str
    dir: Path
    namespaces: list[str] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def ns(self, name: str) -> str:
        return f"kvt{name}{self.tag}"

    def veth(self, name: str) -> str:
        return f"kv{name}{self.tag}"[:15]

    def add_host(self, name: str, octet: int) -> None:
        """A namespace with one veth to the bridge, at SUBNET.octet."""
        ns, inside, outside = self.ns(name), self.veth(name), self.veth(name + "p")
        run("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        run("ip", "-n", ns, "link", "set", "lo", "up")
        run(
            "ip",
            "link",
            "add",
            inside,
            "netns",
            ns,
            "type",
            "veth",
            "peer",
            "name",
            outside,
            "netns",
            self.ns("sw"),
        )
        run("ip", "-n", self.ns("sw"), "link", "set", outside, "master", "br0", "up")
        run("ip", "-n", ns, "addr", "add", f"{SUBNET}.{octet}/24", "dev", inside)
        run("ip", "-n", ns, "link", "set", inside, "up")

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115
        self.procs.append(
            subprocess.Popen(
                ["ip", "netns", "exec", self.ns(name), *argv],
                stdout=log,
                stderr=log,
                env={**os.environ, **(env or {})},
            )
        )

    def slow_and_lossy(self, name: str) -> None:
        """2 Mbit/s out of the host, and 30% of its packets dropped."""
        exec_ = ("ip", "netns", "exec", self.ns(name))
        run(
            *exec_,
            "tc",
            "qdisc",
            "replace",
            "dev",
            self.veth(name),
            "root",
            "tbf",
            "rate",
            "2mbit",
            "burst",
            "32kbit",
            "latency",
            "400ms",
        )
        run(*exec_, "nft", "add", "table", "inet", "faults")
        run(
            *exec_,
            "nft",
            "add",
            "chain",
            "inet",
            "faults",
            "out",
            "{ type filter hook output priority 0; }",
        )
        run(
            *exec_,
            "nft",
            "add",
            "rule",
            "inet",
            "faults",
            "out",
            "meta",
            "random",
            "<",
            str(int(0.3 * 2**32)),
            "drop",
        )

    def heal(self, name: str) -> None:
        exec_ = ("ip", "netns", "exec", self.ns(name))
        run(*exec_, "tc", "qdisc", "del", "dev", self.veth(name), "root")
        run(*exec_, "nft", "delete", "table", "inet", "faults")

    def link(self, name: str, up: bool) -> None:
        run("ip", "-n", self.ns(name), "link", "set", self.veth(name), "up" if up else "down")


def minio_path() -> str | None:
    path = os.environ.get("KVTIER_MINIO") or str(ROOT / "build/go/bin/minio")
    return path if os.access(path, os.X_OK) else shutil.which("minio")


@pytest.fixture
def network(tmp_path: Path) -> Iterator[Network]:
    if os.geteuid() != 0:
        pytest.skip("skipped: network namespaces need root")
    for tool in ("ip", "tc", "nft"):
        if shutil.which(tool) is None:
            pytest.skip(f"skipped: no {tool} (iproute2, nftables)")
    if minio_path() is None:
        pytest.skip("skipped: no minio (scripts/test builds it, or set KVTIER_MINIO)")
    net = Network(tag=str(os.getpid() % 100000), dir=tmp_path)
    try:
        run("ip", "netns", "add", net.ns("sw"))
        net.namespaces.append(net.ns("sw"))
        run("ip", "-n", net.ns("sw"), "link", "add", "br0", "type", "bridge")
        run("ip", "-n", net.ns("sw"), "link", "set", "br0", "up")
        for name, octet in (("s3", 1), ("a", 2), ("b", 3)):
            net.add_host(name, octet)
        yield net
    finally:
        for p in net.procs:
            p.kill()
            p.wait()
        for ns in reversed(net.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def start_kvtierd(net: Network, name: str) -> kvtier.Client:
    d = net.dir / name
    d.mkdir()
    (d / "kvtierd.toml").write_text(
        f'data_dir = "{d}"\n[server]\nnative_listen = "127.0.0.1:0"\nresp_listen = ""\n'
        'http_listen = ""\nunix_socket = "kvtierd.sock"\nthreads = 2\n'
        '[memory]\ncapacity = "64MiB"\nwarm_restart = false\n'
        f'[shared]\nlocation = "s3://{BUCKET}"\ns3_endpoint = "http://{SUBNET}.1:9000"\n'
        f's3_access_key = "{USER}"\ns3_secret_key = "{PASSWORD}"\nnode_id = "{name}"\n'
        'write_policy = "on_put"\nnotice_poll_ms = 200\njanitor_interval_seconds = 0\n'
        "s3_connect_timeout_ms = 500\ns3_request_timeout_ms = 2000\ns3_max_retries = 1\n"
    )
    net.spawn(
        name, [kvtierd_path(), "--config", str(d / "kvtierd.toml"), "--port-file", str(d / "ports")]
    )
    wait_until((d / "ports").exists, f"kvtierd {name} serving")
    # A hang would end in DeadlineExceeded after io_timeout, failing the test.
    return kvtier.Client(f"unix://{d}/kvtierd.sock", retry_timeout=0, io_timeout=30)


def test_delay_loss_and_a_cut_link_never_hang_and_the_cut_node_catches_up(
    network: Network,
) -> None:
    data = network.dir / "minio"
    (data / BUCKET).mkdir(parents=True)  # MinIO serves each top-level directory as a bucket.
    network.spawn(
        "s3",
        [
            str(minio_path()),
            "server",
            str(data),
            "--address",
            f"{SUBNET}.1:9000",
            "--console-address",
            f"{SUBNET}.1:9001",
            "--quiet",
        ],
        {"MINIO_ROOT_USER": USER, "MINIO_ROOT_PASSWORD": PASSWORD, "MINIO_BROWSER": "off"},
    )

    def minio_ready() -> bool:
        probe = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                network.ns("a"),
                "curl",
                "-sf",
                "-o",
                "/dev/null",
                f"http://{SUBNET}.1:9000/minio/health/ready",
            ],
            capture_output=True,
        )
        return probe.returncode == 0

    wait_until(minio_ready, "MinIO serving")
    a, b = start_kvtierd(network, "a"), start_kvtierd(network, "b")
    k = {n: kvtier.named_key(f"net-{n}") for n in ("shared", "slow", "during", "cut")}
    v = {n: f"value {n}".encode() * 1000 for n in k}

    # Healthy: A's put reaches B through G4.
    a.put(k["shared"], v["shared"])
    wait_until(lambda: b.get(k["shared"]) == v["shared"], "B reading A's block from G4")

    # A slow, lossy link: A's G4 reads succeed or miss within their timeouts; never other
    # bytes, never a hang.
    network.slow_and_lossy("a")
    b.put(k["slow"], v["slow"])
    wait_until(lambda: b.get(k["slow"]) == v["slow"], "B storing its block")
    for _ in range(3):
        assert a.get(k["slow"]) in (v["slow"], None)

    # Cut: A serves from its own tiers; its G4 calls fail fast; B's deletion cannot reach it.
    network.link("a", up=False)
    assert a.get(k["shared"]) == v["shared"]
    a.put(k["during"], v["during"])
    assert a.get(k["during"]) == v["during"]
    assert b.delete(k["shared"]) is True
    b.put(k["cut"], v["cut"])
    assert a.get(k["cut"]) is None, "G4 is unreachable from A"
    assert a.get(k["shared"]) == v["shared"], "A cannot have heard of the deletion yet"

    # The link returns: A applies B's deletion notice, and reads what B stored meanwhile.
    network.link("a", up=True)
    network.heal("a")
    wait_until(lambda: a.get(k["shared"]) is None, "A applying B's deletion notice")
    wait_until(lambda: a.get(k["cut"]) == v["cut"], "A reading B's block again")
    assert a.get(k["during"]) == v["during"]
