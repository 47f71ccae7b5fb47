#!/usr/bin/env python3
"""The kvtier Python package against single-core memcpy, in one run, one thread, 2 MiB values.

Starts its own kvtierd (G2 only, arena prefaulted) and measures, over a working set of OPS
blocks read ROUNDS times:
  memcpy           numpy.copyto of each value of a working set as large, into one buffer
  ShmClient.get_into   one block per call, copied out of the mapped arena into a numpy array
  ShmClient.get_into   BATCH blocks per call, into BATCH arrays (torch tensors)
  ShmClient.get        a lease and a read-only memoryview, no copy (the protocol's cost)
  Client.get_into      the native protocol on the Unix socket, received into the array
and prints the ratios to memcpy (target: a shared-memory GET copied out >= 0.70x; bench/all.sh
collects its TARGET line).
Usage: build/venv/bin/python bench/python_bench.py BUILD_DIR [ops] [rounds] [batch]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from targets import target

import kvtier

VALUE = 2 << 20


def timed(ops: int, fn) -> tuple[float, list[float]]:  # type: ignore[no-untyped-def]
    lat = []
    start = time.perf_counter()
    for i in range(ops):
        s = time.perf_counter()
        fn(i)
        lat.append(time.perf_counter() - s)
    return time.perf_counter() - start, sorted(lat)


def main() -> None:
    build = Path(sys.argv[1])
    ops = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 16
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "kvtierd.toml").write_text(
            f'data_dir = "{d}"\n[server]\nnative_listen = ""\nresp_listen = ""\nhttp_listen = ""\n'
            f'unix_socket = "kvtierd.sock"\n[memory]\ncapacity = "{ops * VALUE // 2**20 + 64}MiB"\n'
            'warm_restart = false\nprefault = true\n[disk]\ndir = ""\n'
            '[store]\nmax_block_bytes = "4MiB"\n'
        )
        proc = subprocess.Popen(
            [
                str(build / "src/server/kvtierd"),
                "--config",
                f"{d}/kvtierd.toml",
                "--port-file",
                f"{d}/ports",
            ],
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while not (Path(d) / "ports").exists():
                assert time.monotonic() < deadline and proc.poll() is None, "kvtierd did not start"
                time.sleep(0.01)
            url = (
                "unix://"
                + dict(line.split("=", 1) for line in (Path(d) / "ports").read_text().split())[
                    "unix_socket"
                ]
            )
            run(url, ops, rounds, batch)
        finally:
            proc.terminate()
            proc.wait()


def run(url: str, ops: int, rounds: int, batch: int) -> None:
    shm = kvtier.ShmClient(url)
    client = kvtier.Client(url)
    source = np.random.default_rng(1).integers(0, 256, ops * VALUE, dtype=np.uint8)
    values = [source[i * VALUE : (i + 1) * VALUE] for i in range(ops)]
    keys = [kvtier.named_key(f"bench-{i}") for i in range(ops)]
    shm.put_many(keys, values)
    out = np.zeros(VALUE, np.uint8)
    n = ops * rounds

    def gib(seconds: float, count: int = n) -> float:
        return count * VALUE / seconds / 2**30

    results: dict[str, tuple[float, list[float]]] = {}
    results["memcpy"] = timed(n, lambda i: np.copyto(out, values[i % ops]))
    results["shm get_into x1"] = timed(n, lambda i: shm.get_into([keys[i % ops]], [out]))
    tensors = [torch.empty(VALUE, dtype=torch.uint8) for _ in range(batch)]
    groups = [keys[j : j + batch] for j in range(0, ops - batch + 1, batch)]
    t, lat = timed(len(groups) * rounds, lambda i: shm.get_into(groups[i % len(groups)], tensors))
    results[f"shm get_into x{batch} (torch)"] = (t * n / (len(groups) * rounds * batch), lat)

    def lease(i: int) -> None:
        with shm.get([keys[i % ops]]) as held:
            assert len(held[0]) == VALUE  # type: ignore[arg-type]

    results["shm lease, no copy"] = timed(n, lease)
    results["client get_into (unix)"] = timed(n, lambda i: client.get_into([keys[i % ops]], [out]))
    results["memcpy (again)"] = timed(n, lambda i: np.copyto(out, values[i % ops]))
    last = (len(groups) - 1) * batch  # The group read last: check what landed in the tensors.
    assert all(np.array_equal(tensors[j].numpy(), values[last + j]) for j in range(batch))
    best = max(gib(results["memcpy"][0]), gib(results["memcpy (again)"][0]))
    print(f"2 MiB values, {ops} blocks x {rounds} rounds, one thread")
    print(f"{'':34} {'GiB/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'x memcpy':>9}")
    for name, (seconds, lat) in results.items():
        p50 = statistics.median(lat) * 1e3
        p99 = lat[min(len(lat) - 1, len(lat) * 99 // 100)] * 1e3
        print(f"{name:34} {gib(seconds):7.2f} {p50:7.3f} {p99:7.3f} {gib(seconds) / best:9.2f}")
    print()
    target("Python ShmClient.get_into numpy / memcpy", gib(results["shm get_into x1"][0]) / best,
           ">=", 0.70)  # fmt: skip


if __name__ == "__main__":
    main()
