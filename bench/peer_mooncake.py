#!/usr/bin/env python3
"""Mooncake Store's side of bench/peer_bench.py: a worker run by build/venv-peers/bin/python.

Mooncake's Python package lives in its own environment (scripts/deps.sh --peers), apart from
kvtier's test environment, so peer_bench.py runs this file in a subprocess. The worker is a
Mooncake "dummy client": it talks to the real client (mooncake_client, which holds the memory
segment) at CLIENT_ADDR, and shares memory with it. Each of THREADS threads has its own dummy
client and a buffer of 2 x BLOCKS x SIZE bytes taken from the shared memory pool
(alloc_from_mem_pool, register_buffer): values are put from the first half and read into the
second with the zero-copy batch API (batch_put_from, batch_get_into), BATCH blocks per call,
the real client copying between that memory and its segment.

After one untimed round (the segment's and the buffers' pages faulted in) it prints "ready";
then each line "round TAG" on stdin runs one round with fresh keys (TAG-thread-block): every
thread puts its blocks, then every thread reads them back; a sample of the blocks is checked
byte for byte, and every key is removed. It answers with one JSON line {"put": GiB/s, "get":
GiB/s, "put client cpu": s/GiB, ...}: the CPU of this process and of Mooncake's (SERVER_PIDS,
comma-separated: mooncake_client's and mooncake_master's) per GiB. "quit" or the end of stdin
ends it.

It also holds what both sides of the comparison share (timed_round, fill_blocks,
clear_samples): peer_bench.py imports them, so that kvtier and Mooncake are
timed and checked by the same code.

Usage: peer_mooncake.py CLIENT_ADDR THREADS SIZE BLOCKS BATCH SERVER_PIDS
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import sys
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import kvtierd


def timed_threads(threads: int, work: Callable[[int], None]) -> float:
    """Seconds from the moment ``threads`` threads are let go together until the last of them
    has run ``work(its index)``; the first exception one raised is raised here."""
    start = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        start.wait()
        try:
            work(index)
        except BaseException as e:  # Raised in the caller's thread below.
            errors.append(e)

    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    start.wait()
    begin = time.perf_counter()
    for thread in pool:
        thread.join()
    seconds = time.perf_counter() - begin
    if errors:
        raise errors[0]
    return seconds


def fill_blocks(view: memoryview, size: int, blocks: int, seed: int) -> None:
    """Fills ``blocks`` values of ``size`` bytes: random bytes, each block's own index and
    ``seed`` in its first 16 bytes so that no two blocks are alike."""
    block = bytearray(random.Random(seed).randbytes(size))
    for i in range(blocks):
        block[:16] = seed.to_bytes(8, "little") + i.to_bytes(8, "little")
        view[i * size : (i + 1) * size] = block


def samples(blocks: int) -> list[int]:
    """The blocks a round checks: the first, the last and two between."""
    return sorted({0, blocks // 3, 2 * blocks // 3, blocks - 1})


def clear_samples(dst: memoryview, size: int, blocks: int) -> None:
    """Zeroes the sampled blocks of ``dst``, so that a read that writes nothing is caught."""
    zero = bytes(size)
    for i in samples(blocks):
        dst[i * size : (i + 1) * size] = zero


def check_samples(src: memoryview, dst: memoryview, size: int, blocks: int) -> None:
    """Raises when a sampled block read back differs from the one put."""
    for i in samples(blocks):
        block = slice(i * size, (i + 1) * size)
        if zlib.crc32(dst[block]) != zlib.crc32(src[block]):
            raise AssertionError(f"block {i} read back differs from the value put")


def timed_round(
    threads: int,
    size: int,
    blocks: int,
    put: Callable[[int], None],
    get: Callable[[int], None],
    buffers: list[tuple[memoryview, memoryview]],
    remove_all: Callable[[], int],
    servers: list[int],
) -> dict[str, float]:
    """One round of a store: every thread's ``put``, then every thread's ``get``, each timed
    with all threads together; then the sampled blocks of each thread's (source, destination)
    ``buffers`` checked, and every key removed (``remove_all`` returns how many it removed).
    Returns GiB/s per operation, and the CPU seconds per GiB of this process (the clients) and
    of the store's processes (pids ``servers``) as "<op> client cpu" and "<op> server cpu"."""
    out: dict[str, float] = {}
    moved = threads * blocks * size / 2**30
    for op, work in (("put", put), ("get", get)):
        client = time.process_time()
        server = sum(kvtierd.cpu_seconds(pid) for pid in servers)
        seconds = timed_threads(threads, work)
        out[f"{op} client cpu"] = (time.process_time() - client) / moved
        out[f"{op} server cpu"] = (sum(kvtierd.cpu_seconds(p) for p in servers) - server) / moved
        out[op] = moved / seconds
    for src, dst in buffers:
        check_samples(src, dst, size, blocks)
    removed = remove_all()
    if removed != threads * blocks:
        raise RuntimeError(f"removing the round's keys removed {removed} of {threads * blocks}")
    return out


class Worker:
    """THREADS dummy clients of one real client, each with its shared buffer."""

    def __init__(
        self, client_addr: str, threads: int, size: int, blocks: int, batch: int, servers: list[int]
    ):
        from mooncake.store import MooncakeDistributedStore

        self.threads, self.size, self.blocks, self.batch = threads, size, blocks, batch
        self.servers = servers  # mooncake_client's and mooncake_master's pids.
        self.stores: list[Any] = []
        self.src: list[memoryview] = []
        self.dst: list[memoryview] = []
        self.base: list[int] = []
        pool = 2 * blocks * size
        for t in range(threads):
            store = MooncakeDistributedStore()
            self.stores.append(store)
            # The dummy client's local buffer (Mooncake's copying calls use it) stays small:
            # the zero-copy calls read and write the pool allocated below.
            if store.setup_dummy(pool, 16 << 20, client_addr) != 0:
                raise RuntimeError(f"setup_dummy({client_addr}) failed (mooncake_client's log)")
            base = store.alloc_from_mem_pool(pool)
            if not base or store.register_buffer(base, pool) != 0:
                raise RuntimeError(f"no registered shared buffer of {pool} bytes")
            view = memoryview((ctypes.c_ubyte * pool).from_address(base)).cast("B")
            self.base.append(base)
            self.src.append(view[: blocks * size])
            self.dst.append(view[blocks * size :])
            fill_blocks(self.src[t], size, blocks, seed=t)

    def round(self, tag: str) -> dict[str, float]:
        size, blocks, batch = self.size, self.blocks, self.batch
        calls: list[list[tuple[list[str], list[int], list[int]]]] = []
        for t in range(self.threads):
            keys = [f"{tag}-{t}-{i}" for i in range(blocks)]
            ptrs = [self.base[t] + i * size for i in range(blocks)]
            calls.append(
                [
                    (keys[j : j + batch], ptrs[j : j + batch], [size] * len(keys[j : j + batch]))
                    for j in range(0, blocks, batch)
                ]
            )
            clear_samples(self.dst[t], size, blocks)
        into = blocks * size  # Where a thread's destination half starts, from its base.

        def put(t: int) -> None:
            for keys, ptrs, sizes in calls[t]:
                codes = self.stores[t].batch_put_from(keys, ptrs, sizes)
                if any(code != 0 for code in codes):
                    raise RuntimeError(f"batch_put_from: {codes}")

        def get(t: int) -> None:
            for keys, ptrs, sizes in calls[t]:
                got = self.stores[t].batch_get_into(keys, [p + into for p in ptrs], sizes)
                if any(n != size for n in got):
                    raise RuntimeError(f"batch_get_into: {got}")

        return timed_round(
            self.threads,
            size,
            blocks,
            put,
            get,
            list(zip(self.src, self.dst, strict=True)),
            lambda: int(self.stores[0].remove_all(True)),  # force: the reads' leases still hold.
            self.servers,
        )

    def close(self) -> None:
        for store in self.stores:
            store.close()


def main() -> None:
    # Replies go to the original stdout; anything Mooncake's libraries print there goes to
    # stderr (peer_bench.py's log of this worker) instead.
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    client_addr = sys.argv[1]
    threads, size, blocks, batch = (int(a) for a in sys.argv[2:6])
    servers = [int(pid) for pid in sys.argv[6].split(",")]
    worker = Worker(client_addr, threads, size, blocks, batch, servers)
    try:
        worker.round("warmup")
        print("ready", file=replies, flush=True)
        for line in sys.stdin:
            command, _, tag = line.strip().partition(" ")
            if command == "quit":
                break
            if command != "round":
                raise ValueError(f"unknown command {line!r}")
            print(json.dumps(worker.round(tag)), file=replies, flush=True)
    finally:
        worker.close()


if __name__ == "__main__":
    main()
