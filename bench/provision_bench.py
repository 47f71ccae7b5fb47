#!/usr/bin/env python3
"""Puts while a fresh kvtierd takes G2's memory: starts kvtierd with a large G2 that it backs
up front (`prefault = true`, in the background while it serves), puts 4 KiB blocks over the
Unix socket from the moment it serves until it logs that the memory is taken, and prints the
put latencies (p50, p99, max) against the provisioning time. A ratio max / provisioning near
1 means a put waited for the whole of it (issue 30: the provisioning thread held G2's lock
while backing each step and took it back at once, starving puts); near 0, puts ran beside it.

Usage: bench/provision_bench.py BUILD_DIR [G2 GiB] [rounds]
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kvtierd
import numpy as np

import kvtier


def one_round(build: Path, gib: float, seed: int) -> tuple[list[float], float, int]:
    """Latencies (s) of the puts made while G2 was provisioned, its time (s) and MiB taken."""
    value = np.random.default_rng(seed).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "kvtierd.toml").write_text(
            f'data_dir = "{d}"\n[server]\nnative_listen = ""\nresp_listen = ""\n'
            'http_listen = ""\nunix_socket = "kvtierd.sock"\n'
            f'[memory]\ncapacity = "{int(gib * 1024)}MiB"\nprefault = true\n'
            'warm_restart = false\n[disk]\ndir = ""\n'
        )
        ports, log = d / "ports", d / "kvtierd.log"
        proc = subprocess.Popen(
            [str(build / "src/server/kvtierd"), "--config", str(d / "kvtierd.toml"),
             "--port-file", str(ports)],
            stderr=open(log, "wb"),  # noqa: SIM115
            preexec_fn=kvtierd.die_with_parent,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not ports.exists():
                assert time.monotonic() < deadline and proc.poll() is None, "kvtierd did not start"
                time.sleep(0.001)  # Polling for readiness: the first put goes at once.
            latencies: list[float] = []
            with kvtier.Client(f"unix://{d / 'kvtierd.sock'}") as client:
                i = 0
                while (took := kvtierd.PROVISIONED.search(log.read_text())) is None:
                    assert time.monotonic() < deadline, "G2 was not provisioned within 60 s"
                    key = kvtier.named_key(f"{seed}-{i}")
                    begin = time.perf_counter()
                    client.put(key, value)
                    latencies.append(time.perf_counter() - begin)
                    i += 1
            assert took.group(1) is not None, f"G2 did not take its memory: {took.group(0)}"
            return latencies, int(took.group(2)) / 1e3, int(took.group(1))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait()


def main() -> None:
    build = Path(sys.argv[1])
    gib = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    print(f"{'round':>5} {'MiB':>6} {'provision ms':>12} {'puts':>6} {'p50 ms':>7} "
          f"{'p99 ms':>7} {'max ms':>7} {'max/provision':>13}")  # fmt: skip
    ratios = []
    for r in range(rounds):
        lat, provision_s, mib = one_round(build, gib, r + 1)
        ms = np.array(lat) * 1e3
        ratio = ms.max() / (provision_s * 1e3) if provision_s > 0 else 0.0
        ratios.append(ratio)
        print(f"{r:>5} {mib:>6} {provision_s * 1e3:>12.0f} {len(ms):>6} "
              f"{np.percentile(ms, 50):>7.2f} {np.percentile(ms, 99):>7.2f} {ms.max():>7.1f} "
              f"{ratio:>13.3f}")  # fmt: skip
    print(f"worst put wait / provisioning time: {max(ratios):.3f} (1 = a put waited for all of it)")


if __name__ == "__main__":
    main()
