#!/usr/bin/env python3
"""kvtier's shared memory against Mooncake Store's, on this machine: the store users would pick
instead, both on their same-host shared-memory path.

kvtier: its own kvtierd (G2 only, prefaulted, large enough that nothing is evicted) and one
kvtier.ShmClient per thread, put_many from values in its staging buffer
(ShmClient.staging_buffer: kvtierd copies them into G2, the client copies nothing, as Mooncake's
registered buffers) and get_into destination arrays.
Mooncake Store (build/venv-peers, from python/requirements-peers.txt: `scripts/deps.sh
--peers`): mooncake_master with its own HTTP metadata server (no etcd), mooncake_client (the
"real client", holding a memory segment large enough that nothing is evicted, TCP protocol, as
many service threads as the benchmark has threads) and, in a worker process of that
environment (bench/peer_mooncake.py), one "dummy client" per thread sharing memory with the
real client: batch_put_from and batch_get_into (the zero-copy batch API) on buffers in its
registered shared memory.

For each value size, THREADS threads each put BLOCKS values of their own (fresh keys every
round, BATCH per call) and then read them all back into other buffers; GiB/s of all threads
together, per operation. One untimed round first (pages of both stores and of the buffers
faulted in), then ROUNDS rounds, kvtier and Mooncake alternating which goes first; every key is
deleted after its round. A sample of the blocks read is checked byte for byte after each round.
Prints the medians of GiB/s and of the per-round ratio kvtier / Mooncake, each store's CPU
seconds per GiB (its clients', and kvtierd's or mooncake_client's and mooncake_master's: with
every core busy, what bounds a run), and a TARGET line per operation and size (shared memory
>= 1.2x Mooncake's) that gives the CPU when the target is not met; when build/venv-peers is
missing, "not measured" lines instead, and exits 0.

Usage: build/venv/bin/python bench/peer_bench.py BUILD_DIR [--threads 4] [--rounds 5]
           [--sizes 2097152,262144] [--blocks N] [--batch 16]
  --blocks  values per thread and round (default: 128 MiB of them per thread)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import kvtierd
import numpy as np
from peer_mooncake import clear_samples, fill_blocks, timed_round
from targets import not_measured, target

import kvtier

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / "build/venv-peers/bin"
BYTES_PER_THREAD = 128 << 20
TARGET_RATIO = 1.2
# Mooncake's processes, whose CPU is its server side's.
MOONCAKE_SERVERS = ("mooncake_master", "mooncake_client")


def size_name(size: int) -> str:
    if size % 2**20 == 0:
        return f"{size >> 20} MiB"
    return f"{size >> 10} KiB" if size % 2**10 == 0 else f"{size} B"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Processes:
    """The processes this benchmark starts, each in its own process group with its output in
    a log file; close() stops every group (SIGTERM, then SIGKILL after 10 s)."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: list[str], pipes: bool = False) -> subprocess.Popen[bytes]:
        """Starts ``argv``; ``pipes``: its stdin and stdout are pipes to this process."""
        with (self.logs / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
                stdout=subprocess.PIPE if pipes else log,
                stderr=log,
                cwd=ROOT,
                start_new_session=True,
                preexec_fn=kvtierd.die_with_parent,
            )
        self.started.append((name, proc))
        return proc

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.logs / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(f"   | {line}" for line in text.splitlines()[-lines:])

    def wait_listening(self, name: str, port: int, seconds: float = 60) -> None:
        proc = dict(self.started)[name]
        deadline = time.monotonic() + seconds
        while True:
            with socket.socket() as s:
                # A connect to a port of the ephemeral range that nothing listens on can succeed
                # by connecting the socket to itself (TCP simultaneous open): not a listener.
                if s.connect_ex(("127.0.0.1", port)) == 0 and s.getsockname() != s.getpeername():
                    return
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} does not listen on {port}:\n{self.log_tail(name)}")
            time.sleep(0.05)

    def close(self) -> None:
        for _, proc in reversed(self.started):
            self.signal_group(proc, signal.SIGTERM)  # Its group: what it started goes too.
        for _, proc in reversed(self.started):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                self.signal_group(proc, signal.SIGKILL)
                proc.wait()

    @staticmethod
    def signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):  # The whole group has exited.
            os.killpg(proc.pid, sig)


class Kvtier:
    """kvtier's side: one ShmClient per thread on kvtierd's Unix socket."""

    def __init__(
        self, url: str, server: int, threads: int, size: int, blocks: int, batch: int
    ) -> None:
        self.threads, self.size, self.blocks, self.batch = threads, size, blocks, batch
        self.server = server  # kvtierd's pid.
        self.clients = [kvtier.ShmClient(url) for _ in range(threads)]
        self.admin = kvtier.Client(url)
        # The values live in staging buffers, as Mooncake's in its registered memory.
        self.staging = [c.staging_buffer(blocks * size) for c in self.clients]
        self.src = [np.frombuffer(b.view, np.uint8) for b in self.staging]
        self.dst = [np.ones(blocks * size, np.uint8) for _ in range(threads)]  # Pages faulted.
        for t in range(threads):
            fill_blocks(self.src[t].data, size, blocks, seed=t)

        def per_call(a: Any) -> list[list[Any]]:
            values = [a[i * size : (i + 1) * size] for i in range(blocks)]
            return [values[j : j + batch] for j in range(0, blocks, batch)]

        self.values = [per_call(a) for a in self.src]
        self.buffers = [per_call(a) for a in self.dst]
        self.round("warmup")

    def round(self, tag: str) -> dict[str, float]:
        size, blocks, batch = self.size, self.blocks, self.batch
        keys = []
        for t in range(self.threads):
            names = [kvtier.named_key(f"{tag}-{t}-{i}") for i in range(blocks)]
            keys.append([names[j : j + batch] for j in range(0, blocks, batch)])
            clear_samples(self.dst[t].data, size, blocks)

        def put(t: int) -> None:
            for k, values in zip(keys[t], self.values[t], strict=True):
                self.clients[t].put_many(k, values)

        def get(t: int) -> None:
            for k, buffers in zip(keys[t], self.buffers[t], strict=True):
                got = self.clients[t].get_into(k, buffers)
                if any(n != size for n in got):
                    raise RuntimeError(f"get_into: {got}")

        return timed_round(
            self.threads,
            size,
            blocks,
            put,
            get,
            [(src.data, dst.data) for src, dst in zip(self.src, self.dst, strict=True)],
            lambda: int(self.admin.delete_all().memory_blocks),
            [self.server],
        )

    def close(self) -> None:
        self.src.clear()
        self.values.clear()
        for b in self.staging:
            b.release()
        for client in self.clients:
            client.close()
        self.admin.close()


class Mooncake:
    """Mooncake's side: bench/peer_mooncake.py in Mooncake's environment, one round per
    request."""

    def __init__(
        self, procs: Processes, client_addr: str, threads: int, size: int, blocks: int, batch: int
    ) -> None:
        self.procs = procs
        self.name = f"peer_mooncake-{size}"
        argv = [str(PEERS / "python"), str(ROOT / "bench/peer_mooncake.py"), client_addr]
        servers = ",".join(str(dict(procs.started)[n].pid) for n in MOONCAKE_SERVERS)
        self.proc = procs.start(
            self.name,
            argv + [str(n) for n in (threads, size, blocks, batch)] + [servers],
            pipes=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout
        self.expect("ready")

    def expect(self, what: str) -> str:
        line = self.stdout.readline().decode().strip()
        if not line:
            self.proc.wait()
            raise RuntimeError(
                f"{self.name} exited {self.proc.returncode} before {what}:\n"
                + self.procs.log_tail(self.name)
                + "\nmooncake_client, the real client it connects to:\n"
                + self.procs.log_tail("mooncake_client")
            )
        return line

    def round(self, tag: str) -> dict[str, float]:
        self.stdin.write(f"round {tag}\n".encode())
        self.stdin.flush()
        result: dict[str, float] = json.loads(self.expect(f"round {tag}"))
        return result

    def close(self) -> None:
        self.stdin.write(b"quit\n")
        self.stdin.close()
        self.proc.wait(30)


def start_kvtierd(procs: Processes, build: Path, d: Path, capacity: int) -> tuple[str, str]:
    """Its Unix socket's URL, and why G2 is on 4 KiB pages ("" when it is not), as its start-up
    log says."""
    (d / "kvtierd.toml").write_text(
        f'data_dir = "{d}"\n[server]\nnative_listen = ""\nresp_listen = ""\nhttp_listen = ""\n'
        f'unix_socket = "kvtierd.sock"\n[memory]\ncapacity = "{capacity >> 20}MiB"\n'
        'warm_restart = false\nprefault = true\n[disk]\ndir = ""\n'
        '[store]\nmax_block_bytes = "4MiB"\n'
    )
    argv = [str(build / "src/server/kvtierd"), "--config", f"{d}/kvtierd.toml"]
    proc = procs.start("kvtierd", argv + ["--port-file", f"{d}/ports"])
    ports = kvtierd.wait_ready(proc, d, procs.logs / "kvtierd.log")
    small = re.search(
        r"G2 is on 4 KiB pages[^:]*: (.*), or put memory.arena_file",
        (procs.logs / "kvtierd.log").read_text(errors="replace"),
    )
    return "unix://" + ports["unix_socket"], small.group(1) if small else ""


def start_mooncake(procs: Processes, segment: int, threads: int) -> str:
    """mooncake_master (with its HTTP metadata server) and mooncake_client; returns the real
    client's address, which dummy clients connect to."""
    rpc, metadata, metrics, client = (free_port() for _ in range(4))
    procs.start(
        "mooncake_master",
        [
            str(PEERS / "mooncake_master"),
            f"--rpc_port={rpc}",
            "--rpc_address=127.0.0.1",
            "--enable_http_metadata_server=true",
            "--http_metadata_server_host=127.0.0.1",
            f"--http_metadata_server_port={metadata}",
            "--metrics_host=127.0.0.1",
            f"--metrics_port={metrics}",
            "--enable_metric_reporting=false",  # A log line every few seconds, nothing else.
        ],
    )
    procs.wait_listening("mooncake_master", rpc)
    procs.wait_listening("mooncake_master", metadata)
    procs.start(
        "mooncake_client",
        [
            str(PEERS / "mooncake_client"),
            f"--master_server_address=127.0.0.1:{rpc}",
            f"--metadata_server=http://127.0.0.1:{metadata}/metadata",
            "--host=127.0.0.1",
            f"--port={client}",
            "--protocol=tcp",
            f"--global_segment_size={segment >> 20}MB",
            f"--threads={threads}",
        ],
    )
    procs.wait_listening("mooncake_client", client)
    return f"127.0.0.1:{client}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build", type=Path)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", default="2097152,262144")
    parser.add_argument("--blocks", type=int, default=0)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    blocks = {size: args.blocks or max(1, BYTES_PER_THREAD // size) for size in sizes}
    names = [f"SHM {op} / Mooncake, {size_name(size)}" for size in sizes for op in ("put", "get")]
    if not (PEERS / "python").exists():
        for name in names:
            not_measured(name, "no build/venv-peers (Mooncake): run scripts/deps.sh --peers")
        return

    # Room for two rounds in each store, so that nothing is evicted while a deletion lags.
    round_bytes = max(args.threads * blocks[size] * size for size in sizes)
    shm_before = set(os.listdir("/dev/shm"))
    results: dict[tuple[int, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="kvtier-peer-bench.") as tmp:
        d = Path(tmp)
        procs = Processes(d)
        try:
            url, small_pages = start_kvtierd(procs, args.build, d, 2 * round_bytes + (64 << 20))
            client_addr = start_mooncake(procs, 2 * round_bytes + (256 << 20), args.threads)
            for size in sizes:
                n = blocks[size]
                kv = Kvtier(
                    url, dict(procs.started)["kvtierd"].pid, args.threads, size, n, args.batch
                )
                mc = Mooncake(procs, client_addr, args.threads, size, n, args.batch)
                sides: dict[str, Any] = {"kvtier": kv, "Mooncake": mc}
                for r in range(args.rounds):
                    order = ["kvtier", "Mooncake"] if r % 2 == 0 else ["Mooncake", "kvtier"]
                    for side in order:
                        results.setdefault((size, side), []).append(
                            sides[side].round(f"{size}-{r}")
                        )
                kv.close()
                mc.close()
        finally:
            procs.close()
            # Both stores keep their memory in memfds; remove anything Mooncake left in
            # /dev/shm all the same.
            for name in set(os.listdir("/dev/shm")) - shm_before:
                if name.startswith("mooncake"):
                    (Path("/dev/shm") / name).unlink(missing_ok=True)

    print(
        f"kvtier ShmClient against Mooncake Store's dummy client (shared memory with "
        f"mooncake_client, TCP protocol): {args.threads} threads, {args.batch} blocks per call, "
        f"{args.rounds} rounds alternating, medians"
    )
    print(f"{'':18} {'kvtier GiB/s':>13} {'Mooncake GiB/s':>15} {'kvtier/Mooncake':>16}")
    ratios: dict[str, float] = {}
    why_not: dict[str, str] = {}
    for size in sizes:
        for op in ("put", "get"):
            kv_runs = [r[op] for r in results[(size, "kvtier")]]
            mc_runs = [r[op] for r in results[(size, "Mooncake")]]
            ratio = statistics.median(k / m for k, m in zip(kv_runs, mc_runs, strict=True))
            name = f"SHM {op} / Mooncake, {size_name(size)}"
            ratios[name] = ratio
            label = f"{size_name(size)} x{blocks[size]} {op}"
            print(
                f"{label:18} {statistics.median(kv_runs):13.2f} "
                f"{statistics.median(mc_runs):15.2f} {ratio:16.2f}"
            )
            # Both stores' CPU per GiB (medians): with every core busy, what bounds a run.
            cpu = {
                (side, part): statistics.median(
                    r[f"{op} {part} cpu"] for r in results[(size, side)]
                )
                for side in ("kvtier", "Mooncake")
                for part in ("client", "server")
            }
            why_not[name] = (
                f"CPU per GiB: kvtier {cpu['kvtier', 'client'] + cpu['kvtier', 'server']:.2f} s "
                f"(clients {cpu['kvtier', 'client']:.2f}, kvtierd {cpu['kvtier', 'server']:.2f}), "
                f"Mooncake {cpu['Mooncake', 'client'] + cpu['Mooncake', 'server']:.2f} s (clients "
                f"{cpu['Mooncake', 'client']:.2f}, its processes {cpu['Mooncake', 'server']:.2f}), "
                f"on {os.cpu_count()} cores"
            )
            if op == "get" and small_pages:
                why_not[name] += (
                    f"; G2 is on 4 KiB pages here ({small_pages}), and a copy out of huge pages "
                    'is faster (docs/operations.md, "Huge pages")'
                )
            print(f"{'':18} {why_not[name]}")
    print()
    for name in names:
        target(name, ratios[name], ">=", TARGET_RATIO, why_not=why_not[name])


if __name__ == "__main__":
    main()
