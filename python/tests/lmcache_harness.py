"""LMCache's own processes for the tests: ``lmcache server`` (MP mode, CPU) with an L2 adapter,
and ``lmcache bench server`` / ``lmcache bench l2``, LMCache's model-free benchmarks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from conftest import DEADLINE, free_port

LMCACHE = str(Path(sys.executable).with_name("lmcache"))
ENV = {
    **os.environ,
    "LMCACHE_DISABLE_BANNER": "1",
    "LMCACHE_TRACK_USAGE": "false",
    "PYTHONWARNINGS": "ignore",
}


def resp_adapter(port: int, tenant: str = "", token: str = "") -> dict[str, Any]:
    """LMCache's own RESP client, pointed at kvtierd's RESP port (AUTH tenant token)."""
    return {
        "type": "resp",
        "host": "127.0.0.1",
        "port": port,
        "num_workers": 4,
        "username": tenant,
        "password": token,
    }


def native_adapter(url: str, token: str = "") -> dict[str, Any]:
    return {
        "type": "native_plugin",
        "module_path": "kvtier.lmcache",
        "class_name": "NativeConnector",
        "adapter_params": {"url": url, "token": token},
    }


class LMCacheServer:
    """``lmcache server`` on free ports, CPU only, with `adapter` as its L2."""

    def __init__(self, directory: Path, adapter: dict[str, Any]) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.adapter = adapter
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.port, self.http_port = free_port(), free_port()
        args = ["server", "--host", "127.0.0.1", "--port", str(self.port),
                "--http-host", "127.0.0.1", "--http-port", str(self.http_port),
                "--l1-size-gb", "1", "--eviction-policy", "LRU", "--chunk-size", "256",
                "--supported-transfer-mode", "auto",
                "--l2-adapter", json.dumps(self.adapter)]  # fmt: skip
        with open(self.dir / "lmcache-server.log", "ab") as log:
            self.proc = subprocess.Popen([LMCACHE, *args], stdout=log, stderr=log, env=ENV)
        deadline = time.monotonic() + DEADLINE * 3
        while True:
            if self.proc.poll() is not None:
                raise AssertionError("lmcache server exited: " + self.log()[-4000:])
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/", timeout=5):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        "lmcache server did not start: " + self.log()[-4000:]
                    ) from None
                time.sleep(0.1)  # Polling for readiness, bounded.

    def log(self) -> str:
        return (self.dir / "lmcache-server.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


class BenchRun:
    """What one ``lmcache bench server`` run printed, per request sequence number."""

    def __init__(self, output: str, result: dict[str, Any]) -> None:
        self.output = output
        self.result = result
        self.checksums: dict[tuple[int, str], str] = {
            (int(seq), kind): digest
            for seq, kind, digest in re.findall(
                r"\[seq (\d+)/(cold|warm)\] CHECKSUM: (\w+)", output
            )
        }
        self.cold_hits: dict[int, tuple[int, int]] = {
            int(seq): (int(hit), int(total))
            for seq, hit, total in re.findall(
                r"\[seq (\d+)/cold\] LOOKUP: (\d+)/(\d+) chunks hit", output
            )
        }


def run_lmcache(*args: str) -> subprocess.CompletedProcess[str]:
    """Runs the ``lmcache`` CLI to completion (bounded); fails the test when it fails."""
    proc = subprocess.run(
        [LMCACHE, *args], capture_output=True, text=True, env=ENV, timeout=DEADLINE * 5
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def bench_server(server: LMCacheServer, start: int, end: int, directory: Path) -> BenchRun:
    out = directory / f"bench-{start}-{end}-{time.monotonic_ns()}.json"
    proc = run_lmcache(
        "bench", "server", "--rpc-url", f"tcp://127.0.0.1:{server.port}",
        "--url", f"http://127.0.0.1:{server.http_port}", "--mode", "cpu",
        "--num-tokens", "512", "--start", str(start), "--end", str(end), "--interval", "0",
        "--format", "json", "--output", str(out),
    )  # fmt: skip
    return BenchRun(proc.stdout + proc.stderr, json.loads(out.read_text())["metrics"])


def bench_l2(adapter: dict[str, Any], directory: Path, *extra: str) -> dict[str, Any]:
    """``lmcache bench l2`` with its round-trip data verification; returns its metrics."""
    out = directory / f"bench-l2-{time.monotonic_ns()}.json"
    proc = run_lmcache(
        "bench", "l2", "--l2-adapter", json.dumps(adapter), "--no-skip-verify",
        "--format", "json", "--output", str(out), *extra,
    )  # fmt: skip
    assert "data verified OK" in proc.stdout + proc.stderr, proc.stdout[-3000:]
    metrics: dict[str, Any] = json.loads(out.read_text())["metrics"]
    return metrics
