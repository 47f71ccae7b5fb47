"""Network faults between two kvtierd and their shared S3 tier: MinIO and each kvtierd in a
network namespace of its own, joined by a bridge; node A's link made slow and lossy, then cut.
G4 calls end within their timeouts (nothing hangs, nothing wrong is served), the cut node
serves what its own tiers hold, and once the link is back it catches up on the deletions the
other node announced meanwhile.

The namespaces, the slow link (a 2 Mbit/s token bucket) and the loss (nftables dropping 30% of
A's packets at random) are bench/netns.py's, shared with bench/fleet_bench.py.

Needs root, ``ip``, ``tc``, ``nft`` and MinIO (``scripts/test`` builds it into build/go/bin);
skips, saying which is missing, without them. The clients reach each kvtierd through its Unix
socket, which network namespaces do not separate.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, kvtierd_path, wait_until

import kvtier

sys.path.insert(0, str(ROOT / "bench"))
from minio_peer import minio_path
from netns import MINIO_PASSWORD, MINIO_USER, SUBNET, Network, missing

BUCKET = "kvtier-g4"


@pytest.fixture
def network(tmp_path: Path) -> Iterator[Network]:
    if (why := missing()) is not None:
        pytest.skip(f"skipped: {why}")
    if minio_path() is None:
        pytest.skip("skipped: no minio (scripts/test builds it, or set KVTIER_MINIO)")
    with Network(tag=str(os.getpid() % 100000), dir=tmp_path) as net:
        net.add_host("s3", 1)
        net.add_host("a", 2)
        net.add_host("b", 3)
        yield net


def start_kvtierd(net: Network, name: str, s3: str) -> kvtier.Client:
    d = net.dir / name
    d.mkdir()
    (d / "kvtierd.toml").write_text(
        f'data_dir = "{d}"\n[server]\nnative_listen = "127.0.0.1:0"\nresp_listen = ""\n'
        'http_listen = ""\nunix_socket = "kvtierd.sock"\nthreads = 2\n'
        '[memory]\ncapacity = "64MiB"\nwarm_restart = false\n'
        f'[shared]\nlocation = "s3://{BUCKET}"\ns3_endpoint = "{s3}"\n'
        f's3_access_key = "{MINIO_USER}"\ns3_secret_key = "{MINIO_PASSWORD}"\nnode_id = "{name}"\n'
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
    s3 = network.start_minio("s3", f"{SUBNET}.1", network.dir / "minio", [BUCKET])
    a, b = start_kvtierd(network, "a", s3), start_kvtierd(network, "b", s3)
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
