"""kvtierd's dashboard at ``/`` in headless Chromium: it renders, refreshes by itself, shows what
``/metrics`` says after known traffic, and a screenshot of it is not blank."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from chromium import Page, assert_not_blank
from conftest import Daemon, wait_until

import kvtier


def binary(n: float) -> str:
    """The dashboard's byte format (binary units, two decimals)."""
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    i = 0
    while n >= 1024 and i < len(units) - 1:
        n /= 1024
        i += 1
    return f"{int(n)} B" if i == 0 else f"{n:.2f} {units[i]}"


@pytest.fixture
def dashboard(make_daemon: type[Daemon], tmp_path: Path) -> Iterator[tuple[Daemon, Page]]:
    g3 = f'[disk]\ndir = "{tmp_path / "g3"}"\ncapacity = "64MiB"\nsegment_bytes = "8MiB"\n'
    d = make_daemon(extra=g3)
    page = Page(f"http://127.0.0.1:{d.http_port}/", tmp_path / "chromium")
    yield d, page
    page.close()


def samples(page: Page) -> int:
    return int(page.evaluate("Number(document.body.dataset.samples || 0)"))


def test_the_dashboard_shows_what_metrics_says_after_known_traffic(
    dashboard: tuple[Daemon, Page], tmp_path: Path
) -> None:
    daemon, page = dashboard
    page.wait_for("Number(document.body.dataset.samples) >= 1", "its first refresh")
    assert page.text("health") == "ok"
    assert page.text("g4-name") == "G4" and "not configured" in page.text("g4-status")

    # Known traffic, after the page's first sample: acme stores 20 blocks of 64 KiB and asks
    # for 24 keys, 16 of them stored (16 hits, 8 misses: 66.7%); default stores 3.
    keys = [bytes([i]) * 32 for i in range(24)]
    with kvtier.Client(daemon.tcp_url, "acme-token", tenant="acme") as acme:
        for k in keys[:20]:
            acme.put(k, k[:1] * 65536)
        found = [acme.get(k) is not None for k in keys[4:]]
    assert found == [True] * 16 + [False] * 4
    with kvtier.Client(daemon.tcp_url) as default:
        for k in keys[:3]:
            default.put(k, b"x" * 1000)
        assert default.get(b"\xff" * 32) is None

    # The page refreshes by itself: wait for a sample taken after the traffic.
    after = samples(page) + 1
    page.wait_for(f"Number(document.body.dataset.samples) > {after}", "a refresh after the traffic")
    m = daemon.metrics()
    assert page.text("tenant-acme-blocks") == "20"
    assert page.text("tenant-acme-hits") == str(int(m['kvtier_tenant_hits_total{tenant="acme"}']))
    assert page.text("tenant-acme-hits") == "16"
    assert page.text("tenant-acme-misses") == "4"
    assert page.text("tenant-acme-puts") == "20"
    assert page.text("tenant-acme-window-ratio") == "80.0%"
    assert page.text("tenant-default-blocks") == "3"
    assert page.text("tenant-acme-bytes") == binary(m['kvtier_tenant_bytes{tenant="acme"}'])
    assert page.text("g2-capacity") == binary(m['kvtier_tier_capacity_bytes{tier="g2"}'])
    assert page.text("g2-capacity") == "256.00 MiB"
    assert page.text("g2-used").endswith(binary(m['kvtier_tier_used_bytes{tier="g2"}']))
    assert page.text("g2-blocks") == "23"
    assert page.text("g3-capacity") == "64.00 MiB"
    # G2: 16 hits of 16 + 5 lookups (acme's 4 misses and default's one).
    assert page.text("g2-window-ratio") == "76.2%"
    assert page.text("g2-ratio") == "76.2%"
    # Connections: the two clients came and went over the native protocol.
    assert int(page.text("conn-native-opened")) == int(
        m['kvtier_connections_opened_total{protocol="native"}']
    )
    assert int(page.text("conn-native-opened")) >= 2
    assert page.text("g2-evictions") == "0"
    assert_not_blank(page.screenshot(tmp_path / "dashboard.png"))


def test_the_dashboard_and_planner_are_served_with_their_assets_inside(daemon: Daemon) -> None:
    base = f"http://127.0.0.1:{daemon.http_port}"
    for path, marker in (("/", "kvtier_tenant_hits_total"), ("/plan", "const PLAN = {")):
        with urllib.request.urlopen(base + path) as r:
            assert r.headers["Content-Type"] == "text/html; charset=utf-8"
            page = r.read().decode()
        assert marker in page
        # Works offline: no script, style or image from anywhere else.
        assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in page and "src=" not in page


def two_nodes(
    make_daemon: type[Daemon], tmp_path: Path, setting: str
) -> tuple[Daemon, Daemon, Page]:
    """Nodes A and B sharing a G4 directory (written on put, `setting` added to [shared]), and
    A's dashboard."""
    g4 = tmp_path / "g4"
    g4.mkdir()
    shared = f'[shared]\nlocation = "{g4}"\nwrite_policy = "on_put"\n{setting}\n'
    a = make_daemon(extra=shared + 'node_id = "node-a"\n')
    b = make_daemon(extra=shared + 'node_id = "node-b"\n')
    return a, b, Page(f"http://127.0.0.1:{a.http_port}/", tmp_path / "chromium")


def test_the_g4_panel_shows_the_other_node_and_its_deletion_notices(
    make_daemon: type[Daemon], tmp_path: Path
) -> None:
    a, b, page = two_nodes(make_daemon, tmp_path, "notice_poll_ms = 100")
    try:
        page.wait_for("document.getElementById('g4-nodes') !== null", "the G4 panel")
        assert page.text("g4-nodes") == "1"
        assert page.text("g4-capacity") == "shared"
        # A deletion on node B reaches node A as a notice: A has seen two nodes.
        with kvtier.Client(b.tcp_url) as client:
            client.put(b"\x07" * 32, b"v" * 4096)
            assert client.delete(b"\x07" * 32)
        page.wait_for(
            "document.getElementById('g4-nodes').textContent === '2'", "node B in the G4 panel"
        )
        m = a.metrics()
        assert m["kvtier_shared_nodes_seen"] == 2
        page.wait_for(
            "document.getElementById('g4-notices-applied').textContent !== '0'", "B's notice"
        )
        assert (
            int(page.text("g4-notices-applied"))
            <= a.metrics()["kvtier_deletion_notices_applied_total"]
        )
        assert page.text("g4-notices-pending") == "0"
        # Node A reads a block node B published: the panel shows A's G4 traffic. (The deleted
        # block may or may not have been published before its delete cancelled the upload, so
        # B's publications are counted from here.)
        published = b.metrics()["kvtier_shared_puts_total"]
        with kvtier.Client(b.tcp_url) as client:
            client.put(b"\x08" * 32, b"w" * 4096)
        wait_until(lambda: b.metrics()["kvtier_shared_puts_total"] > published, "B's upload")
        with kvtier.Client(a.tcp_url) as client:
            assert client.get(b"\x08" * 32) == b"w" * 4096
        assert a.metrics()["kvtier_g4_read_bytes_total"] >= 4096
        page.wait_for("document.getElementById('g4-read').textContent !== '0 B'", "A's G4 reads")
        assert page.text("g4-written") == "0 B"  # A published nothing.
    finally:
        page.close()


def test_the_g4_panel_shows_every_nodes_g4_traffic_from_their_reports(
    make_daemon: type[Daemon], tmp_path: Path
) -> None:
    a, b, page = two_nodes(make_daemon, tmp_path, "report_ms = 100")
    try:
        page.wait_for("document.getElementById('fleet-node-a-name') !== null", "A's own row")
        assert page.text("fleet-node-a-age") == "this node"
        # B stores two blocks (uploaded to G4); A reads them from there.
        with kvtier.Client(b.tcp_url) as client:
            client.put_many([b"\x01" * 32, b"\x02" * 32], [b"x" * 8192, b"y" * 8192])
        wait_until(lambda: b.metrics()["kvtier_shared_puts_total"] == 2, "B's uploads")
        written = b.metrics()["kvtier_g4_written_bytes_total"]
        with kvtier.Client(a.tcp_url) as client:
            assert client.get_many([b"\x01" * 32, b"\x02" * 32]) == [b"x" * 8192, b"y" * 8192]
        # A's panel shows B's traffic as B reported it, and its own; the last row sums them.
        page.wait_for(
            f"document.getElementById('fleet-node-b-written')?.textContent === '{binary(written)}'",
            "B's report of its uploads",
        )
        assert page.text("fleet-node-b-objects") == "0"
        page.wait_for("document.getElementById('fleet-node-a-objects').textContent === '2'", "A")
        assert page.text("fleet-node-a-read") == binary(16384)
        assert page.text("fleet-all-objects") == "2"
        assert page.text("fleet-all-written") == binary(written)
        assert page.text("fleet-all-read") == binary(16384)
        fleet = json.loads(
            urllib.request.urlopen(f"http://127.0.0.1:{a.http_port}/fleet", timeout=10).read()
        )
        assert [n["node"] for n in fleet["nodes"]] == ["node-a", "node-b"]
        assert fleet["nodes"][1]["shared_written_bytes"] == written
        # B stops cleanly: it leaves the panel.
        b.close()
        page.wait_for("document.getElementById('fleet-node-b-name') === null", "B gone")
        assert page.text("fleet-all-objects") == "2"
    finally:
        page.close()


def test_the_fleet_row_says_when_there_are_no_reports(daemon: Daemon, tmp_path: Path) -> None:
    with pytest.raises(urllib.error.HTTPError) as no_g4:
        urllib.request.urlopen(f"http://127.0.0.1:{daemon.http_port}/fleet", timeout=10)
    assert no_g4.value.code == 404
    assert "no G4" in json.loads(no_g4.value.read())["error"]
    page = Page(f"http://127.0.0.1:{daemon.http_port}/", tmp_path / "chromium")
    try:
        page.wait_for("document.getElementById('fleet-status') !== null", "the fleet row")
        assert "no fleet reports" in page.text("fleet-status")
    finally:
        page.close()
