#!/usr/bin/env python3
"""Warm restart of kvtierd with a full G2, in one run: fills G2 (2 MiB blocks over the Unix
socket, G3 off so that only G2 can bring them back), stops kvtierd with SIGTERM while its
clients stay connected, starts it again, and reads every block back on the same client (it
reconnects) with `get_into`, checking its bytes. Prints the stop time (the index and the
checksums of G2 written), the start time (until kvtierd serves: the checksums verified), the
share of blocks back, and the restart's speed against reading the same bytes once from memory
in this process (the floor any copy-based reload would pay).

Usage: bench/restart_bench.py BUILD_DIR [G2 GiB]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kvtierd
import numpy as np
from targets import target

import kvtier

VALUE = 2 << 20


def start(build: Path, d: Path) -> tuple[subprocess.Popen[bytes], dict[str, str], float]:
    ports = d / "ports"
    ports.unlink(missing_ok=True)
    begin = time.perf_counter()
    proc = subprocess.Popen(
        [str(build / "src/server/kvtierd"), "--config", str(d / "kvtierd.toml"),
         "--port-file", str(ports)],
        stderr=open(d / "kvtierd.log", "ab"),  # noqa: SIM115
        preexec_fn=kvtierd.die_with_parent,
    )  # fmt: skip
    deadline = time.monotonic() + 600
    while not ports.exists():
        assert time.monotonic() < deadline and proc.poll() is None, "kvtierd did not start"
        time.sleep(0.005)  # Polling for readiness.
    elapsed = time.perf_counter() - begin
    values = dict(line.split("=", 1) for line in ports.read_text().split())
    return proc, values, elapsed


def main() -> None:
    build = Path(sys.argv[1])
    gib = float(sys.argv[2]) if len(sys.argv) > 2 else 8.0
    blocks = int(gib * (1 << 30)) // VALUE - 1
    pattern = np.random.default_rng(7).integers(0, 256, VALUE, dtype=np.uint8)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "kvtierd.toml").write_text(
            f'data_dir = "{d}"\n[server]\nnative_listen = ""\nresp_listen = ""\n'
            'http_listen = ""\nunix_socket = "kvtierd.sock"\n'
            f'[memory]\ncapacity = "{int(gib * 1024)}MiB"\n[disk]\ndir = ""\n'
            '[store]\nmax_block_bytes = "4MiB"\n'
        )
        proc, ports, _ = start(build, d)
        try:
            url = "unix://" + ports["unix_socket"]
            keys = [kvtier.named_key(f"restart-{i}") for i in range(blocks)]
            c = kvtier.Client(url)
            for i, k in enumerate(keys):
                pattern[:8] = np.frombuffer(i.to_bytes(8, "little"), dtype=np.uint8)
                c.put(k, pattern.tobytes())
            # Clients stay connected, idle, as engines' do (LMCache's native plugin holds a
            # ShmClient): the stop must not wait for them.
            shm = kvtier.ShmClient(url)
            begin = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait() == 0
            stop_s = time.perf_counter() - begin
            proc, ports, start_s = start(build, d)
            back = 0  # The client reconnects on its first call.
            # Into one array, as engines read (get_into): Client.get's new 2 MiB bytes per
            # block would measure this process's allocator, not the reload (docs/operations.md).
            out = np.empty(VALUE, dtype=np.uint8)
            read_begin = time.perf_counter()
            for i, k in enumerate(keys):
                pattern[:8] = np.frombuffer(i.to_bytes(8, "little"), dtype=np.uint8)
                if c.get_into([k], [out]) == [VALUE] and np.array_equal(out, pattern):
                    back += 1
            read_s = time.perf_counter() - read_begin
            c.close()
            shm.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait()
            # G2's files: the arena file and arena.* (the tenants' regions, index, lock).
            arena = ports.get("g2_arena_file", "")
            if arena:
                for p in [Path(arena), *Path(arena).parent.glob(Path(arena).name + ".*")]:
                    p.unlink(missing_ok=True)
        log = (d / "kvtierd.log").read_text()
    total = blocks * VALUE
    # One pass over the same number of bytes in this process: what any reload that copies
    # G2 from somewhere (G3, a snapshot file) costs at the very least.
    buf = np.ones(total // 8, dtype=np.uint64)
    floor_begin = time.perf_counter()
    int(buf.sum())
    floor_s = time.perf_counter() - floor_begin
    del buf
    cores = os.cpu_count()
    print(f"G2 {gib:g} GiB: {blocks} blocks of 2 MiB ({total / 2**30:.2f} GiB), {cores} cores")
    print(f"  stop (SIGTERM to exit, index + checksums written)  {stop_s:7.2f} s")
    print(f"  start (to serving, checksums verified)             {start_s:7.2f} s")
    share = 100 * back / blocks
    print(f"  blocks back with the right bytes                   {back}/{blocks} ({share:.1f}%)")
    target("warm restart: G2 blocks back with the right bytes", share, ">=", 100, unit="%")
    print(f"  read back with get_into over the Unix socket        {read_s:7.2f} s "
          f"({total / read_s / 1e9:.2f} GB/s)")  # fmt: skip
    print(f"  one pass over {total / 2**30:.2f} GiB in memory here           {floor_s:7.2f} s "
          f"-> stop+start = {(stop_s + start_s) / floor_s:.2f}x of it")  # fmt: skip
    for line in log.splitlines():
        if line.startswith("kvtier: G2:"):
            print("  " + line)


if __name__ == "__main__":
    main()
