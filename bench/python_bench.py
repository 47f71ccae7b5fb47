#!/usr/bin/env python3
"""The kvtier Python package against single-core memcpy, in one run, one thread, 2 MiB values.

Starts its own kvtierd (G2 only, arena prefaulted, polling between requests: one client thread
leaves it a core) and measures, over a working set of OPS blocks read ROUNDS times, after one
untimed read of each (a client that has mapped its pages), the phases below alternating 5 times
(medians):
  memcpy           numpy.copyto of each value of a working set as large, into one buffer, from
                   memory on huge pages (numpy's default) and on 4 KiB pages
  ShmClient.get_into   one block per call, copied out of the mapped arena into a numpy array
  ShmClient.get_into   BATCH blocks per call, into BATCH arrays (torch tensors), against
                   numpy.copyto into as many (BATCH destinations do not stay in the cache)
  ShmClient.get        a lease and a read-only memoryview, no copy (the protocol's cost)
  Client.get_into      the native protocol on the Unix socket, received into the array
and prints the ratios to memcpy (target: a shared-memory GET copied out >= 0.70x; bench/all.sh
collects its TARGET line). The target's memcpy reads pages of the size the arena's mapping has
(from /proc/self/smaps): copying out of 4 KiB pages costs 10-25% more than out of huge
pages (a TLB miss per page), and where the kernel gives shared memory no huge pages
(/sys/kernel/mm/transparent_hugepage/shmem_enabled = never) the arena has 4 KiB pages.
Usage: build/venv/bin/python bench/python_bench.py BUILD_DIR [ops] [rounds] [batch]
       (environment: BUSY_POLL_US, default 200)
"""

from __future__ import annotations

import mmap
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import kvtierd
import numpy as np
import torch
from targets import target

import kvtier

VALUE = 2 << 20
# [server] busy_poll_us of the kvtierd it starts (environment BUSY_POLL_US).
BUSY_POLL_US = int(os.environ.get("BUSY_POLL_US", "200"))


def timed(ops: int, fn) -> tuple[float, list[float]]:  # type: ignore[no-untyped-def]
    lat = []
    start = time.perf_counter()
    for i in range(ops):
        s = time.perf_counter()
        fn(i)
        lat.append(time.perf_counter() - s)
    return time.perf_counter() - start, sorted(lat)


def small_pages(size: int) -> np.ndarray:
    """A zeroed array of `size` bytes on 4 KiB pages (no transparent huge pages)."""
    m = mmap.mmap(-1, size)
    m.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(m, np.uint8)


def arena_huge_fraction() -> float:
    """How much of this process's mappings of kvtierd's arena (kvtier-g2 files) sits on huge
    pages, from /proc/self/smaps."""
    size = huge = 0
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):  # A mapping's first line.
            inside = "kvtier-g2" in line
        elif inside and head[0] == "Size:":
            size += int(head[1])
        elif inside and head[0] in ("ShmemPmdMapped:", "FilePmdMapped:"):
            huge += int(head[1])
    return huge / size if size else 0.0


def main() -> None:
    build = Path(sys.argv[1])
    ops = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 16
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        proc, ports = kvtierd.start(
            build,
            d,
            f'data_dir = "{d}"\n[server]\nnative_listen = ""\nresp_listen = ""\nhttp_listen = ""\n'
            # One client thread leaves a core: the loop polls through a 2 MiB copy.
            f'unix_socket = "kvtierd.sock"\nbusy_poll_us = {BUSY_POLL_US}\n'
            f'[memory]\ncapacity = "{ops * VALUE // 2**20 + 64}MiB"\n'
            'warm_restart = false\nprefault = true\n[disk]\ndir = ""\n'
            '[store]\nmax_block_bytes = "4MiB"\n',
        )
        try:
            url = "unix://" + ports["unix_socket"]
            run(url, ops, rounds, batch)
        finally:
            proc.terminate()
            proc.wait()


def run(url: str, ops: int, rounds: int, batch: int) -> None:
    shm = kvtier.ShmClient(url)
    client = kvtier.Client(url)
    source = np.random.default_rng(1).integers(0, 256, ops * VALUE, dtype=np.uint8)
    values = [source[i * VALUE : (i + 1) * VALUE] for i in range(ops)]
    small = small_pages(ops * VALUE)
    small[:] = source
    small_values = [small[i * VALUE : (i + 1) * VALUE] for i in range(ops)]
    keys = [kvtier.named_key(f"bench-{i}") for i in range(ops)]
    shm.put_many(keys, values)
    out = np.ones(VALUE, np.uint8)
    tensors = [torch.ones(VALUE, dtype=torch.uint8) for _ in range(batch)]
    groups = [keys[j : j + batch] for j in range(0, ops - batch + 1, batch)]
    # A client that has read its blocks before, as the C++ benchmark's: this process has mapped
    # their pages (the first read of each 2 MiB of the region maps it, once per process).
    shm.get_into(keys, [out] * ops)
    n = ops * rounds

    def lease(i: int) -> None:
        with shm.get([keys[i % ops]]) as held:
            assert len(held[0]) == VALUE  # type: ignore[arg-type]

    def batched(i: int) -> None:
        shm.get_into(groups[i % len(groups)], tensors)

    def copied(i: int) -> None:  # What batched does, from a numpy array on the arena's pages.
        first = i % len(groups) * batch
        for j, t in enumerate(tensors):
            np.copyto(t.numpy(), small_values[first + j])

    phases = {
        "memcpy": (n, lambda i: np.copyto(out, values[i % ops])),
        "memcpy, 4 KiB pages": (n, lambda i: np.copyto(out, small_values[i % ops])),
        "shm get_into x1": (n, lambda i: shm.get_into([keys[i % ops]], [out])),
        f"memcpy x{batch}, into {batch} tensors": (len(groups) * rounds, copied),
        f"shm get_into x{batch} (torch)": (len(groups) * rounds, batched),
        "shm lease, no copy": (n, lease),
        "client get_into (unix)": (n, lambda i: client.get_into([keys[i % ops]], [out])),
    }
    batch_base = f"memcpy x{batch}, into {batch} tensors"
    per_call = {batch_base: batch, f"shm get_into x{batch} (torch)": batch}
    # The phases alternate `repeats` times; each is reported by its median repeat, and a ratio
    # to memcpy is taken within each repeat, then the median (a shared machine's noise moves
    # whole stretches of a run).
    repeats = 5
    gib: dict[str, list[float]] = {name: [] for name in phases}
    lat: dict[str, list[float]] = {name: [] for name in phases}
    for _ in range(repeats):
        for name, (count, fn) in phases.items():
            seconds, latencies = timed(count, fn)
            gib[name].append(count * per_call.get(name, 1) * VALUE / seconds / 2**30)
            lat[name] += latencies
    last = (len(groups) - 1) * batch  # The group read last: check what landed in the tensors.
    assert all(np.array_equal(tensors[j].numpy(), values[last + j]) for j in range(batch))
    huge_arena = arena_huge_fraction() >= 0.5
    base = "memcpy" if huge_arena else "memcpy, 4 KiB pages"

    def ratio(name: str, against: str) -> float:
        return statistics.median(g / b for g, b in zip(gib[name], gib[against], strict=True))

    print(
        f"2 MiB values, {ops} blocks x {rounds} rounds, one thread, {repeats} repeats, kvtierd "
        f"with server.busy_poll_us = {BUSY_POLL_US}; the arena "
        f"is mapped on {'huge' if huge_arena else '4 KiB'} pages: x memcpy is against '{base}' "
        f"('{batch_base}' for batches: {batch} destinations do not stay in the cache as one does)"
    )
    print(f"{'':34} {'GiB/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'x memcpy':>9}")
    for name in phases:
        against = batch_base if name in per_call and name != batch_base else base
        ordered = sorted(lat[name])
        p50 = ordered[len(ordered) // 2] * 1e3
        p99 = ordered[min(len(ordered) - 1, len(ordered) * 99 // 100)] * 1e3
        x = ratio(name, against)
        print(f"{name:34} {statistics.median(gib[name]):7.2f} {p50:7.3f} {p99:7.3f} {x:9.2f}")
    print()
    target("Python ShmClient.get_into numpy / memcpy", ratio("shm get_into x1", base), ">=", 0.70)


if __name__ == "__main__":
    main()
