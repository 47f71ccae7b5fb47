#!/usr/bin/env python3
"""kvtierd's S3 endpoint against MinIO on the same machine, and against kvtierd's native
protocol, in one run: 2 MiB objects, CLIENTS client processes, each putting then getting
OBJECTS x ROUNDS objects of its own, through two S3 clients:

  nixl    NIXL's OBJ plugin (nixl-cu12, aws-sdk-cpp inside): what vLLM's obj tier and Dynamo use
  boto3   the AWS SDK for Python (SigV4, default flexible checksums: CRC32 by awscrt)

each against kvtierd's S3 endpoint (s3) and MinIO (minio: build/go/bin/minio, which
scripts/deps.sh builds; its data directory on this machine's disk, as it is deployed), and
  native  kvtier.Client (the native protocol over TCP), one block per call.
It prints throughput (MB/s over all clients), p50 and p99 latency per operation, and the
targets, measured with the NIXL client (boto3's when NIXL is missing): kvtierd's S3 >= 1.5x
MinIO and >= 0.7x native for PUT and GET, p99 <= MinIO's.
Every PUT writes a new object, as an engine offloading new KV does: the same bytes stored again
under a name are a no-op on both protocols (native skips a key it holds, S3 compares the body),
which would measure neither.
Usage: build/venv/bin/python bench/s3_bench.py BUILD_DIR [objects] [rounds] [clients]
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import kvtierd
from minio_peer import start_local_minio
from targets import not_measured, target

VALUE = 2 << 20
HAVE_NIXL = importlib.util.find_spec("nixl_cu12") is not None
KEY_ID, SECRET = "AKIDBENCH", "bench-secret-key"
BUCKET = "bench"


def s3_client(url: str, key: str, secret: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=2),
    )


# One client's latencies (seconds), when its first request began and its last ended, and the
# CPU seconds its process spent in between: the clients' set-up (imports, connections, agents)
# is outside every measurement.
Timings = tuple[list[float], float, float, float]
# Time the clients get for their set-up before they all begin at once: a client that began
# late would stretch the run by its lateness (a native run of 512 MiB lasts ~0.2 s).
SETUP_S = 3.0
# How often a NIXL client asks whether its transfer is done. Asking in a loop would take a
# core from the server on this 2-core machine; vLLM's obj tier asks once per scheduler step.
POLL_S = 0.0001


def start_together(start_at: float) -> float:
    """Waits until `start_at` (perf_counter, CLOCK_MONOTONIC: one clock for every process)."""
    while (left := start_at - time.perf_counter()) > 0:
        time.sleep(left)  # Waiting for the common start, not for another process.
    return time.perf_counter()


def nixl_worker(
    url: str, key: str, secret: str, names: list[str], op: str, start_at: float
) -> Timings:
    import numpy as np
    from nixl_cu12._api import nixl_agent, nixl_agent_config

    agent = nixl_agent(f"bench-{os.getpid()}", nixl_agent_config(backends=[]))
    agent.create_backend(
        "OBJ",
        {"bucket": BUCKET, "endpoint_override": url, "scheme": "http", "region": "us-east-1",
         "access_key": key, "secret_key": secret, "use_virtual_addressing": "false"},
    )  # fmt: skip
    buf = np.frombuffer(os.urandom(VALUE), dtype=np.uint8).copy()
    agent.register_memory([(buf.ctypes.data, VALUE, 0, "")], "DRAM")
    agent.register_memory([(0, VALUE, i + 1, n) for i, n in enumerate(names)], "OBJ")
    local = agent.get_xfer_descs([(buf.ctypes.data, VALUE, 0)], "DRAM")
    latencies = []
    begin, cpu = start_together(start_at), time.process_time()
    for i in range(len(names)):
        remote = agent.get_xfer_descs([(0, VALUE, i + 1)], "OBJ")
        t = time.perf_counter()
        handle = agent.initialize_xfer(
            "WRITE" if op == "put" else "READ", local, remote, agent.name
        )
        state = agent.transfer(handle)
        while state == "PROC":
            time.sleep(POLL_S)
            state = agent.check_xfer_state(handle)
        assert state == "DONE", state
        latencies.append(time.perf_counter() - t)
        agent.release_xfer_handle(handle)
    return latencies, begin, time.perf_counter(), time.process_time() - cpu


def worker(args: tuple[str, str, str, str, int, int, int, str, float]) -> Timings:
    """One client's puts or gets, begun at `start_at`."""
    kind, url, key, secret, client_id, objects, rounds, op, start_at = args
    body = os.urandom(VALUE)
    # Every path writes objects of its own: a PUT over a name another path wrote would replace
    # an object (compare, delete, store), which is not what a PUT of a new KV block costs.
    prefix = kind.replace(" ", "-")
    names = [f"{prefix}/c{client_id}/r{r}/o{i}" for r in range(rounds) for i in range(objects)]
    if kind.endswith("nixl"):
        return nixl_worker(url, key, secret, names, op, start_at)
    latencies = []
    if kind == "native":
        import kvtier

        c = kvtier.Client(url)
        keys = [kvtier.named_key(n) for n in names]
        begin, cpu = start_together(start_at), time.process_time()
        for k in keys:
            t = time.perf_counter()
            if op == "put":
                c.put_many([k], [body])
            else:
                got = c.get_many([k])
                assert got[0] is not None
            latencies.append(time.perf_counter() - t)
        return latencies, begin, time.perf_counter(), time.process_time() - cpu
    s3 = s3_client(url, key, secret)
    s3.head_bucket(Bucket=BUCKET)  # Connected before the start.
    begin, cpu = start_together(start_at), time.process_time()
    for n in names:
        t = time.perf_counter()
        if op == "put":
            s3.put_object(Bucket=BUCKET, Key=n, Body=body)
        else:
            assert len(s3.get_object(Bucket=BUCKET, Key=n)["Body"].read()) == VALUE
        latencies.append(time.perf_counter() - t)
    return latencies, begin, time.perf_counter(), time.process_time() - cpu


# Per operation: MB/s, p50 ms, p99 ms, and the server's and the clients' CPU ms per GB moved.
Result = tuple[float, float, float, float, float]


def measure(
    pool: Any,
    kind: str,
    url: str,
    key: str,
    secret: str,
    server: int,
    clients: int,
    objects: int,
    rounds: int,
) -> dict[str, Result]:
    """`server` is the pid of the server under test; its CPU time counts from the clients'
    set-up to their end (set-up asks nothing of it but connections)."""
    out = {}
    for op in ("put", "get"):
        start_at = time.perf_counter() + SETUP_S
        jobs = [(kind, url, key, secret, i, objects, rounds, op, start_at) for i in range(clients)]
        server_cpu = kvtierd.cpu_seconds(server)
        results = pool.map(worker, jobs)
        server_cpu = kvtierd.cpu_seconds(server) - server_cpu
        late = max(r[1] for r in results) - start_at
        if late > 0.01:
            print(f"{kind} {op}: a client began {late * 1e3:.0f} ms late (set-up over {SETUP_S} s)")
        # From the first request to the last (perf_counter is CLOCK_MONOTONIC: one clock for
        # every process).
        elapsed = max(r[2] for r in results) - min(r[1] for r in results)
        lat = sorted(x for r in results for x in r[0])
        mbps = len(lat) * VALUE / elapsed / 1e6
        gb = len(lat) * VALUE / 1e9
        out[op] = (
            mbps,
            statistics.median(lat) * 1e3,
            lat[int(len(lat) * 0.99) - 1] * 1e3,
            server_cpu / gb * 1e3,
            sum(r[3] for r in results) / gb * 1e3,
        )
        print(
            f"{kind:7s} {op}: {mbps:8.0f} MB/s  p50 {out[op][1]:6.2f} ms  p99 {out[op][2]:6.2f} ms"
            f"  CPU per GB: server {out[op][3]:5.0f} ms, clients {out[op][4]:5.0f} ms",
            flush=True,
        )
    return out


def main() -> int:
    build = Path(sys.argv[1]).resolve()
    objects = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    clients = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    print(f"{clients} clients x {objects} objects of {VALUE >> 20} MiB x {rounds} rounds")
    # G2 holds every object written, by each path that writes to kvtierd (boto3, NIXL, native:
    # a GET of an evicted one would fail), and a quarter more.
    capacity_mib = max(2048, 3 * clients * objects * rounds * (VALUE >> 20) * 5 // 4)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        daemon, ports = kvtierd.start(
            build,
            d / "kvtierd",
            f'data_dir = "{d}/kvtierd"\n[server]\nnative_listen = "127.0.0.1:0"\n'
            'resp_listen = ""\nhttp_listen = ""\nunix_socket = ""\n'
            f'[s3]\nlisten = "127.0.0.1:0"\n[memory]\ncapacity = "{capacity_mib}MiB"\n'
            "prefault = true\n"
            'warm_restart = false\n[disk]\ndir = ""\n'
            f'[[tenants]]\nname = "default"\ns3_access_key = "{KEY_ID}"\n'
            f's3_secret_key = "{SECRET}"\n',
        )
        s3_port, native_port = ports["s3_port"], ports["native_port"]
        procs = [daemon]
        try:
            s3_url = f"http://127.0.0.1:{s3_port}"
            s3_client(s3_url, KEY_ID, SECRET).create_bucket(Bucket=BUCKET)
            ctx = multiprocessing.get_context("spawn")
            with ctx.Pool(clients) as pool:
                pool.map(int, range(clients))  # Started before anything is timed.
                s3_clients = ["s3 boto3"] + (["s3 nixl"] if HAVE_NIXL else [])
                results = {
                    name: measure(
                        pool, name, s3_url, KEY_ID, SECRET, daemon.pid, clients, objects, rounds
                    )
                    for name in s3_clients
                }
                results["native"] = measure(
                    pool,
                    "native",
                    f"tcp://127.0.0.1:{native_port}",
                    "",
                    "",
                    daemon.pid,
                    clients,
                    objects,
                    rounds,
                )
                started = start_local_minio(d / "minio", KEY_ID, SECRET, d / "minio.log")
                if started is not None:
                    minio, minio_url = started
                    procs.append(minio)
                    s3_client(minio_url, KEY_ID, SECRET).create_bucket(Bucket=BUCKET)
                    for name in s3_clients:
                        kind = name.replace("s3", "minio")
                        results[kind] = measure(
                            pool,
                            kind,
                            minio_url,
                            KEY_ID,
                            SECRET,
                            minio.pid,
                            clients,
                            objects,
                            rounds,
                        )
        finally:
            for p in procs:
                p.terminate()
                p.wait()
    via = "nixl" if HAVE_NIXL else "boto3"
    for op in ("put", "get"):
        s3, native = results[f"s3 {via}"][op], results["native"][op]
        # Where the clients share the server's cores, their CPU bounds the run: what the server
        # alone would allow is the ratio of the server's CPU per GB.
        why = (
            f"kvtierd spends {s3[3] / native[3]:.2f}x native's CPU per GB (server-bound: "
            f"{native[3] / s3[3]:.2f}x native), the S3 clients {s3[4] / native[4]:.1f}x the native "
            f"clients', all on {os.cpu_count()} cores"
        )
        target(f"s3 {op} ({via}) vs native", s3[0] / native[0], ">=", 0.7, why_not=why)
        if f"minio {via}" in results:
            minio_r = results[f"minio {via}"][op]
            target(f"s3 {op} ({via}) vs MinIO", s3[0] / minio_r[0], ">=", 1.5)
            target(f"s3 {op} ({via}) p99 vs MinIO's", s3[2] / minio_r[2], "<=", 1.0)
        else:
            not_measured(
                f"s3 {op} vs MinIO", "no MinIO (scripts/test builds it, or set KVTIER_MINIO)"
            )
    return 0  # Met or not, each target's line says; bench/all.sh counts them.


if __name__ == "__main__":
    sys.exit(main())
