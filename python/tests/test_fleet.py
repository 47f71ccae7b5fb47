"""The real fleet of bench/fleet_bench.py, short: three kvtierd in network namespaces of their
own behind rate-limited links, G4 on MinIO, a few hundred requests of a generated trace, the
KV-aware router's index Dynamo's (fed from the nodes' KV events). What the fleet did must be
what `kvtier replay --nodes 3` predicts of the same requests: block hits per source within 5
points, G4 traffic within 20%; and no read may return other bytes than were stored.

Skips without root, ip, tc, curl or MinIO (scripts/test builds it), as
test_network_faults.py does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, kvtier_cli_path, kvtierd_path

sys.path.insert(0, str(ROOT / "bench"))
from minio_peer import minio_path
from netns import missing

BENCH = ROOT / "bench/fleet_bench.py"


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    """The bench on the build of the tests' kvtierd (BUILD/src/server/kvtierd)."""
    kvtierd = kvtierd_path()
    env = {"KVTIERD": kvtierd, "KVTIER_CLI": kvtier_cli_path()}
    return subprocess.run(
        [sys.executable, str(BENCH), str(Path(kvtierd).parents[2]), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=900,
    )


def run_fleet(tmp_path: Path, *args: str) -> tuple[str, list[dict[str, Any]]]:
    """The bench on 300 requests of 60 generated chat sessions and 3 nodes; its output and
    results.json. Skips where namespaces or MinIO are missing."""
    if (why := missing(("ip", "tc", "curl"))) is not None:
        pytest.skip(f"skipped: {why}")
    if minio_path() is None:
        pytest.skip("skipped: no minio (scripts/test builds it, or set KVTIER_MINIO)")
    trace = tmp_path / "chat.jsonl"
    subprocess.run(
        [kvtier_cli_path(), "trace", "gen", "--workload", "chat", "--sessions", "60"]
        + ["--seed", "11", "--max-requests", "300", "--out", str(trace)],
        check=True,
        capture_output=True,
    )
    out = tmp_path / "fleet"
    run = bench(str(trace), "--nodes", "3", "--out", str(out), *args)
    assert run.returncode == 0, run.stdout + run.stderr
    results: list[dict[str, Any]] = json.loads((out / "results.json").read_text())
    return run.stdout, results


def test_a_three_node_fleet_matches_the_fleet_replay(tmp_path: Path) -> None:
    # Small tiers, so that blocks move through G3 and G4.
    stdout, results = run_fleet(
        tmp_path, "--requests", "300", "--g2-blocks", "64", "--g3-blocks", "192", "--burst", "0"
    )
    assert [r["router"] for r in results] == ["kv-aware", "session", "round-robin"]
    for r in results:
        real = r["real"]
        assert real["wrong_values"] == 0, stdout
        assert real["uploads_unannounced"] == 0, stdout
        assert r["ok"], stdout
        assert sum(real["per_node_requests"]) == 300
        assert real["hits"]["own G3"] > 0, stdout
    # What one node stored, the others found in G4.
    assert all(r["real"]["hits"]["G4 (other)"] > 0 for r in results), stdout


def test_a_node_cut_from_g4_is_reported_and_serves_what_it_holds(tmp_path: Path) -> None:
    stdout, [result] = run_fleet(
        tmp_path, "--requests", "120", "--routers", "session", "--cut", "1:60", "--burst", "0"
    )
    real = result["real"]
    assert real["wrong_values"] == 0, stdout
    assert real["uploads_cut"] > 0, stdout
    assert "node n1's link cut at request 60" in stdout
    # The nodes still serve what their own tiers hold.
    assert real["hits"]["own G2"] > 0


def test_a_burst_from_every_node_reads_each_block_from_g4_once_per_node(tmp_path: Path) -> None:
    # 8 readers per node want the same 16 blocks at once; none of the 3 nodes holds them.
    stdout, [result] = run_fleet(
        tmp_path, "--routers", "", "--burst", "16", "--burst-readers", "8", "--requests", "1"
    )
    burst = result["burst"]
    assert burst["wrong_values"] == burst["misses"] == burst["lookups_short"] == 0, stdout
    # Each node read each block from G4 exactly once: 16 reads, not 8 x 16.
    assert [n["G4 reads"] for n in burst["per_node"]] == [16, 16, 16], stdout
    assert burst["minio"]["GetObject"] == 3 * 16, stdout
    assert result["ok"], stdout


def test_bad_arguments_are_refused_before_anything_starts(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 1024, "hash_ids": [1, 2]}\n')
    wrong = bench(str(trace), "--routers", "kv-aware,nearest", "--out", str(tmp_path / "o"))
    assert wrong.returncode == 2
    assert "unknown router 'nearest'" in wrong.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("not json\n")
    none = bench(str(empty), "--out", str(tmp_path / "o"))
    assert none.returncode != 0
    assert "has no request that parses" in none.stderr
