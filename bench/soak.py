#!/usr/bin/env python3
"""Soak: hundreds of clients against one kvtierd for a while, through a restart and an upgrade.

``--clients`` clients (256 by default), spread over ``--processes`` worker processes, share one
tenant over the native protocol (Unix socket and TCP), shared memory, RESP and HTTP. They mix
puts (with sessions), gets, prefix lookups, deletes, session deletions and /metrics reads for
``--seconds`` seconds (600 by default), with G2 small enough to evict all the time, G3 on a
local directory and G4 on MinIO (build/go/bin/minio; a shared directory when it is absent).
A third of the way in kvtierd is stopped and started again (a warm restart); two thirds of
the way in it is upgraded in place (``--take-over``).

Every value is a function of its block's name, so every read is checked byte for byte, whoever
wrote it and whatever was deleted meanwhile (a miss is a miss, never other bytes). Clients
retry as their own libraries do across a restart (kvtier.Client and ShmClient by themselves,
redis-py with its Retry, HTTP for up to 15 s); a call that still fails is a failure.

Prints operations, wrong bytes and failed calls; p50/p99 latency per operation in each
``--window`` seconds; kvtierd's resident memory, what its heap holds allocated and free, and its
open descriptors over time. Exits 1 when a byte was wrong or a call failed.

Usage: bench/soak.py BUILD_DIR [--seconds S] [--clients N] [--processes P] [--json OUT]
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import kvtierd
import redis
from minio_peer import free_port, start_local_minio
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from targets import target

import kvtier

TENANT, TOKEN = "acme", "acme-token"
PROTOCOLS = ("native-unix", "native-tcp", "shm", "resp", "http")
MINIO_USER, MINIO_PASSWORD, BUCKET = "soak-user", "soak-password", "soak"
# Most blocks small, some large: what a KV cache of a few models sees, scaled down.
SIZES = (16 << 10, 32 << 10, 64 << 10, 256 << 10)


def value_of(name: str) -> bytes:
    """The one value a block name ever has: its size and bytes follow from the name."""
    digest = hashlib.blake2b(name.encode(), digest_size=64).digest()
    size = SIZES[digest[0] % len(SIZES)]
    return (digest * (size // 64 + 1))[:size]


class Worker:
    """One client: a protocol, its own names, reads of everyone's."""

    def __init__(self, index: int, clients: int, ports: dict[str, Any], start: float) -> None:
        self.index = index
        self.clients = clients
        self.protocol = PROTOCOLS[index % len(PROTOCOLS)]
        self.rng = random.Random(index)
        self.start = start
        self.ports = ports
        self.written = 0  # This client's names are c<index>-<0..written).
        self.session_gen = 0
        self.ops: dict[str, int] = defaultdict(int)
        self.wrong = 0
        self.failures: list[str] = []
        self.samples: list[tuple[float, str, float]] = []  # (seconds in, op, latency s)
        self.client: Any = None
        self.connect()

    def connect(self) -> None:
        p = self.ports
        if self.protocol == "native-unix":
            self.client = kvtier.Client("unix://" + p["unix_socket"], TOKEN)
        elif self.protocol == "native-tcp":
            self.client = kvtier.Client(f"tcp://127.0.0.1:{p['native_port']}", TOKEN)
        elif self.protocol == "shm":
            self.client = kvtier.ShmClient("unix://" + p["unix_socket"], TOKEN)
        elif self.protocol == "resp":
            self.client = redis.Redis(
                host="127.0.0.1",
                port=int(p["resp_port"]),
                username=TENANT,
                password=TOKEN,
                retry=Retry(ExponentialBackoff(cap=0.5, base=0.01), 60),
                retry_on_error=[redis.ConnectionError, redis.TimeoutError],
                socket_timeout=30,
                protocol=2,  # kvtierd speaks RESP2 (redis-py 8 asks for RESP3 by default)
            )

    def session(self) -> int:
        return (self.index + 1) * 1_000_000 + self.session_gen

    def some_name(self) -> str | None:
        """A name some client has (probably) written: often this one's, often another's."""
        if self.rng.random() < 0.5 and self.written:
            return f"c{self.index}-{self.rng.randrange(self.written)}"
        other = self.rng.randrange(self.clients)
        return f"c{other}-{self.rng.randrange(1 + self.written)}"

    def check(self, name: str, got: bytes | None) -> None:
        if got is not None and got != value_of(name):
            self.wrong += 1

    def timed(self, op: str, fn: Any) -> Any:
        begin = time.perf_counter()
        try:
            return fn()
        except (kvtier.Error, redis.RedisError, OSError, http.client.HTTPException) as e:
            self.failures.append(f"{self.protocol} {op}: {e!r}")
            return None
        finally:
            now = time.perf_counter()
            self.ops[op] += 1
            self.samples.append((now - self.start, op, now - begin))

    def http(self, method: str, path: str) -> int:
        """One HTTP request, tried again for up to 15 s while kvtierd is not there."""
        deadline = time.monotonic() + 15
        while True:
            conn = http.client.HTTPConnection("127.0.0.1", int(self.ports["http_port"]), timeout=30)
            try:
                conn.request(method, path)
                response = conn.getresponse()
                response.read()
                if response.status >= 500:
                    raise http.client.HTTPException(f"{method} {path}: HTTP {response.status}")
                return int(response.status)
            except (TimeoutError, ConnectionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # kvtierd is restarting: try again shortly.
            finally:
                conn.close()

    def step(self) -> None:
        roll = self.rng.random()
        c = self.client
        if self.protocol == "http":
            if roll < 0.5:
                name = self.some_name()
                key = kvtier.named_key(name or "none").hex()
                self.timed(
                    "delete", lambda: self.http("DELETE", f"/admin/blocks/{key}?tenant={TENANT}")
                )
            elif roll < 0.6:
                sid = (self.rng.randrange(self.clients) + 1) * 1_000_000
                self.timed(
                    "delete_session",
                    lambda: self.http("DELETE", f"/admin/sessions/{sid}?tenant={TENANT}"),
                )
            else:
                self.timed("metrics", lambda: self.http("GET", "/metrics"))
            return
        if roll < 0.4:  # put
            name = f"c{self.index}-{self.written}"
            self.written += 1
            value = value_of(name)
            key = kvtier.named_key(name)
            if self.protocol == "resp":
                self.timed("put", lambda: c.set(name, value))
            elif self.protocol == "shm":
                self.timed("put", lambda: c.put_many([key], [value], session=self.session()))
            else:
                self.timed("put", lambda: c.put(key, value, session=self.session()))
            return
        name = self.some_name()
        if name is None:
            return
        key = kvtier.named_key(name)
        if roll < 0.8:  # get
            if self.protocol == "resp":
                got = self.timed("get", lambda: c.get(name))
            elif self.protocol == "shm":
                buf = bytearray(max(SIZES))
                size = self.timed("get", lambda: c.get_into([key], [buf]))
                got = None if not size or size[0] is None else bytes(buf[: size[0]])
            else:
                got = self.timed("get", lambda: c.get(key))
            self.check(name, got)
        elif roll < 0.9 and self.protocol.startswith("native"):
            keys = [kvtier.named_key(f"{name}-{i}") for i in range(4)]
            self.timed("lookup_prefix", lambda: c.lookup_prefix(keys))
        elif roll < 0.98:
            if self.protocol == "resp":
                self.timed("delete", lambda: c.delete(name))
            elif self.protocol != "shm":
                self.timed("delete", lambda: c.delete(key))
        elif self.protocol.startswith("native"):
            self.timed("delete_session", lambda: c.delete_session(self.session()))
            self.session_gen += 1

    def run(self, stop: Any) -> None:
        while not stop.is_set():
            self.step()

    def report(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "ops": dict(self.ops),
            "wrong": self.wrong,
            "failures": self.failures[:20],
            "failed": len(self.failures),
            "samples": self.samples,
        }


def worker_process(
    indices: list[int], clients: int, ports: dict[str, Any], start: float, stop: Any, out: Any
) -> None:
    workers = [Worker(i, clients, ports, start) for i in indices]
    threads = [threading.Thread(target=w.run, args=(stop,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put([w.report() for w in workers])


class Kvtierd:
    def __init__(self, build: Path, d: Path, config: str) -> None:
        self.build, self.dir = build, d
        (d / "kvtierd.toml").write_text(config)
        self.proc: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, str] = {}

    def start(self, take_over: bool = False) -> subprocess.Popen[bytes] | None:
        old = self.proc
        port_file = self.dir / ("ports.new" if take_over else "ports")
        port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [
                str(self.build / "src/server/kvtierd"),
                "--config",
                str(self.dir / "kvtierd.toml"),
                "--port-file",
                str(port_file),
            ]
            + (["--take-over"] if take_over else []),
            stderr=open(self.dir / "kvtierd.log", "ab"),  # noqa: SIM115
            preexec_fn=kvtierd.die_with_parent,
        )
        deadline = time.monotonic() + 120
        while not port_file.exists():
            assert self.proc.poll() is None, (self.dir / "kvtierd.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "kvtierd did not start"
            time.sleep(0.01)  # Polling for readiness.
        self.ports = dict(line.split("=", 1) for line in port_file.read_text().split())
        return old

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=120) == 0, "kvtierd did not stop cleanly"

    def sample(self) -> dict[str, int] | None:
        """Of the kvtierd serving now: resident memory and its anonymous part, what its heap
        holds allocated and holds freed for reuse (bytes), open descriptors, and the blocks G2
        and G3 hold (what its bookkeeping grows with)."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        try:
            proc_status = Path(f"/proc/{self.proc.pid}/status").read_text()
            status = dict(line.split(":", 1) for line in proc_status.splitlines())
            fds = len(os.listdir(f"/proc/{self.proc.pid}/fd"))
            port = self.ports["http_port"]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                metrics = r.read().decode()
        except (OSError, KeyError):
            return None
        gauges = {
            name: int(float(value))
            for line in metrics.splitlines()
            if not line.startswith("#")
            for name, value in [line.rsplit(" ", 1)]
        }
        return {
            "rss": int(status["VmRSS"].split()[0]) << 10,
            "anon": int(status["RssAnon"].split()[0]) << 10,
            "heap_allocated": gauges.get("kvtier_heap_allocated_bytes", 0),
            "heap_free": gauges.get("kvtier_heap_free_bytes", 0),
            "fds": fds,
            "g2_blocks": gauges.get('kvtier_tier_blocks{tier="g2"}', 0),
            "g3_blocks": gauges.get('kvtier_tier_blocks{tier="g3"}', 0),
        }


def start_minio(d: Path) -> tuple[subprocess.Popen[bytes] | None, str]:
    """MinIO with an empty bucket; (None, "") when it is not built."""
    started = start_local_minio(d / "minio", MINIO_USER, MINIO_PASSWORD, d / "minio.log", [BUCKET])
    return started if started is not None else (None, "")


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build", type=Path)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--clients", type=int, default=256)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--window", type=float, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    window = args.window or max(5.0, args.seconds / 10)
    build = args.build.resolve()
    with tempfile.TemporaryDirectory(prefix="kvtier-soak-") as tmp:
        d = Path(tmp)
        minio, endpoint = start_minio(d)
        if minio is not None:
            g4 = (
                f'location = "s3://{BUCKET}"\ns3_endpoint = "{endpoint}"\n'
                f's3_access_key = "{MINIO_USER}"\ns3_secret_key = "{MINIO_PASSWORD}"\n'
            )
        else:
            (d / "g4").mkdir()
            g4 = f'location = "{d / "g4"}"\n'
        daemon = Kvtierd(
            build,
            d,
            f'data_dir = "{d}"\n[server]\n'
            f'native_listen = "127.0.0.1:{free_port()}"\nresp_listen = "127.0.0.1:{free_port()}"\n'
            f'http_listen = "127.0.0.1:{free_port()}"\nunix_socket = "kvtierd.sock"\n'
            '[memory]\ncapacity = "64MiB"\n[disk]\ndir = "disk"\ncapacity = "1GiB"\n'
            f'[shared]\nnode_id = "soak"\n{g4}'
            '[store]\nmax_block_bytes = "1MiB"\n'
            f'[[tenants]]\nname = "default"\n[[tenants]]\nname = "{TENANT}"\ntoken = "{TOKEN}"\n',
        )
        daemon.start()
        arena = daemon.ports.get("g2_arena_file", "")
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        out = ctx.Queue()
        start = time.perf_counter()
        procs = [
            ctx.Process(
                target=worker_process,
                args=(
                    list(range(p, args.clients, args.processes)),
                    args.clients,
                    daemon.ports,
                    start,
                    stop,
                    out,
                ),
            )
            for p in range(args.processes)
        ]
        for p in procs:
            p.start()
        resources: list[dict[str, float]] = []
        events: list[tuple[float, str]] = []
        restarted = upgraded = False
        try:
            while (now := time.perf_counter() - start) < args.seconds:
                if (s := daemon.sample()) is not None:
                    resources.append({"at": now, **s})
                if not restarted and now >= args.seconds / 3:
                    restarted = True
                    daemon.stop()
                    daemon.start()
                    events.append((now, "restart"))
                elif not upgraded and now >= 2 * args.seconds / 3:
                    upgraded = True
                    old = daemon.start(take_over=True)
                    assert old is not None and old.wait(timeout=120) == 0, "the old kvtierd failed"
                    events.append((now, "upgrade"))
                time.sleep(1)  # Sampling resources once a second.
            stop.set()
            reports = [r for _ in procs for r in out.get(timeout=300)]
            for p in procs:
                p.join(timeout=60)
        finally:
            stop.set()
            if daemon.proc is not None and daemon.proc.poll() is None:
                daemon.stop()
            if minio is not None:
                minio.terminate()
                minio.wait()
            for f in Path("/dev/shm").glob(Path(arena).name + "*") if arena else []:
                f.unlink(missing_ok=True)  # The warm-restart arena: nothing comes after us.
            if os.environ.get("KVTIER_SOAK_KEEP"):
                shutil.copytree(d, os.environ["KVTIER_SOAK_KEEP"], dirs_exist_ok=True)

    ops: dict[str, int] = defaultdict(int)
    by_protocol: dict[str, int] = defaultdict(int)
    latencies: dict[tuple[int, str], list[float]] = defaultdict(list)
    for r in reports:
        for op, n in r["ops"].items():
            ops[op] += n
            by_protocol[r["protocol"]] += n
        for t, op, latency in r["samples"]:
            latencies[(int(t // window), op)].append(latency)
    wrong = sum(r["wrong"] for r in reports)
    failed = sum(r["failed"] for r in reports)
    failures = [f for r in reports for f in r["failures"]][:10]
    windows = sorted({w for w, _ in latencies})
    names = sorted({op for _, op in latencies})

    print(
        f"soak: {args.clients} clients, {args.seconds:.0f} s, G4 on "
        f"{'MinIO' if minio is not None else 'a directory (no MinIO)'}; "
        + ", ".join(f"{what} at {t:.0f} s" for t, what in events)
    )
    print(
        f"operations: {sum(ops.values())} ("
        + ", ".join(f"{op} {n}" for op, n in sorted(ops.items()))
        + "); by protocol: "
        + ", ".join(f"{p} {n}" for p, n in sorted(by_protocol.items()))
        + ")"
    )
    print(f"wrong bytes: {wrong}; failed calls: {failed}")
    target("soak: wrong bytes and failed calls", wrong + failed, "<=", 0, unit="")
    for f in failures:
        print("  " + f)
    print(f"latency p50/p99 in ms, per {window:.0f} s:")
    print(f"{'from s':>7} " + " ".join(f"{op:>19}" for op in names))
    for w in windows:
        cells = []
        for op in names:
            v = latencies.get((w, op), [])
            cells.append(
                f"{1e3 * percentile(v, 0.5):8.2f}/{1e3 * percentile(v, 0.99):8.2f}"
                if v
                else f"{'':>17}"
            )
        print(f"{w * window:7.0f} " + " ".join(f"{c:>19}" for c in cells))
    print(
        "kvtierd (the serving process): resident and anonymous memory, heap allocated and "
        "heap kept free (MiB), descriptors, blocks held"
    )
    columns = ("rss", "anon", "heap_allocated", "heap_free")
    print(
        f"{'at s':>8} {'RSS':>8} {'anon':>8} {'heap':>8} {'free':>8} {'fds':>5} "
        f"{'G2 blocks':>9} {'G3 blocks':>9}"
    )
    step = max(1, len(resources) // 12)
    for r in resources[::step]:
        print(
            f"{r['at']:8.0f} "
            + " ".join(f"{r[c] / (1 << 20):8.1f}" for c in columns)
            + f" {r['fds']:5.0f} {r['g2_blocks']:9.0f} {r['g3_blocks']:9.0f}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "ops": ops,
                    "wrong": wrong,
                    "failed": failed,
                    "failures": failures,
                    "events": events,
                    "resources": resources,
                    "latency_ms": {
                        f"{w * window:.0f}/{op}": [1e3 * percentile(v, p) for p in (0.5, 0.99)]
                        for (w, op), v in latencies.items()
                    },
                },
                indent=1,
            )
        )
    return 1 if wrong or failed else 0


if __name__ == "__main__":
    sys.exit(main())
