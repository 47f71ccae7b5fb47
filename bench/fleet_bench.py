#!/usr/bin/env python3
"""A real fleet on this machine, against the fleet replay's model of it (issue 28).

NODES kvtierd (4 by default), each in a network namespace of its own behind a rate-limited
link (tc tbf, --link both ways), share G4 on MinIO (in a namespace of its own too). The first
--requests requests of TRACE (default: a generated agentic trace, seed --seed) are sent, one
after another, each to the node a router picks: the node looks the prompt's blocks up
(lookup_prefix), reads the G3 and G4 part of the prefix it holds (get_many; kvtierd promotes
them to G2, as an engine's load would) and stores the rest (put_many, chained), blocks scaled
down to --block-bytes of random bytes (every read is checked against what was stored). Each
node has --g2-blocks blocks of G2 and room for --g3-blocks in G3; G4 is written on put. A
hit's source is the tier lookup_prefix names; a G4 hit is the node's own when the node's KV
events announced the block's upload first.

Routers (--routers, in the fleet replay's definitions, docs/planning.md "Fleet replay"):
round-robin; least-loaded (queued prefill seconds); session (sticky by conversation);
kv-aware: the prefix a node holds in its G2 and G3, as a fraction of the prompt, less its
decayed load over the fleet's mean, nodes above --load-cap times the mean skipped; where
several nodes hold the longest prefix, the one whose events last stored the prompt's deepest
block beyond it, if it is one of them and within the cap. Its index
is Dynamo's KV router index (dynamo._core.RadixTree, ai-dynamo-runtime), fed only from the
nodes' KV events ([events], vLLM's wire format over ZMQ): each node is one Dynamo worker
holding its G2 (CPU) and G3 (DISK) blocks. Load is prefill time in trace time, each request
taking what the fleet replay's prefill model gives for its hits (PrefillTime); the model's
flags (--model, --gpu, --tp, --mfu, --dtype, the tiers' links...) go to both.

After each request the bench waits for the node's KV events of what it stored (G2) and
uploaded (G4), up to --event-wait seconds; a block whose upload is not announced by then is
reported, and the run goes on. --cut NODE:REQUEST cuts a node's link before a request: what
it could not upload and what its lookups found but could not read are reported.

The same prefix, written beside the results as prefix.jsonl, goes through `kvtier replay
--nodes NODES` with the same router and per-node G2 and G3 in blocks; both are printed side
by side: block hits by source (own G2, own G3, G4 written by the node itself, G4 written by
another node) as a share of block references, and G4 reads and writes in blocks. The targets,
one TARGET line each per router (bench/all.sh collects them): hit ratios within 5 points per
source and in all, G4 traffic (reads and writes) within 20%.

Then a burst (--burst BLOCKS, 0 for none): a node outside the fleet stores a prompt of BLOCKS
blocks, uploaded to G4, and --burst-readers clients on every node of the fleet look it up and
read it at the same moment. Printed per node: its G4 reads, the reads and existence checks
that joined another request's instead of asking G4 (kvtierd's single flight) and the checks
answered by a recent one ([shared] exists_cache_ms); and MinIO's own count of the requests it
served, per S3 API. The target: one G4 read per block and node. With
--check the exit status is 1 when a target is missed.

Needs root, ip, tc, curl, MinIO (scripts/test builds it), the release build and build/venv.
Usage: build/venv/bin/python bench/fleet_bench.py BUILD [TRACE] [--nodes 4] [--requests 400]
       [--routers kv-aware,session,round-robin] [--burst 64] [--burst-readers 16]
       [--out DIR] [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet_nodes import BUCKET, POOL, Fleet, block_hash, started, value_of
from netns import Network, missing
from targets import target

import kvtier

SOURCES = ("own G2", "own G3", "G4 (own)", "G4 (other)")
ROUTERS = ("round-robin", "least-loaded", "session", "kv-aware")
HIT_POINTS = 5.0  # Targets: hit ratios within 5 points, G4 traffic within 20%.
TRAFFIC_SHARE = 0.20


@dataclass
class Request:
    timestamp_ms: int
    input_length: int
    hash_ids: list[int]
    session: str
    tenant: str
    extra: dict[str, Any]


@dataclass
class Trace:
    block_tokens: int
    requests: list[Request]


def read_trace(path: Path, limit: int, default_block_tokens: int) -> Trace:
    """The first `limit` requests of a Mooncake or kvtier trace (trace.h), lines that do not
    parse skipped as the replay skips them."""
    block_tokens = default_block_tokens
    requests: list[Request] = []
    with open(path) as f:
        for n, line in enumerate(f):
            if len(requests) >= limit:
                break
            try:
                d = json.loads(line)
            except json.JSONDecodeError:
                continue
            if n == 0 and "kvtier_trace" in d:
                block_tokens = int(d["block_tokens"])
                continue
            try:
                r = Request(
                    int(d["timestamp"]),
                    int(d["input_length"]),
                    [int(h) for h in d["hash_ids"]],
                    str(d.get("session", "")),
                    str(d.get("tenant", "default")),
                    {k: d[k] for k in ("output_length", "retain_s", "finished") if k in d},
                )
            except (KeyError, TypeError, ValueError):
                continue
            if len(r.hash_ids) > -(-r.input_length // block_tokens):
                continue
            requests.append(r)
    if not requests:
        raise SystemExit(f"fleet_bench: {path} has no request that parses")
    return Trace(block_tokens, requests)


def write_trace(trace: Trace, path: Path) -> None:
    with open(path, "w") as f:
        f.write(json.dumps({"kvtier_trace": 1, "block_tokens": trace.block_tokens}) + "\n")
        for r in trace.requests:
            line: dict[str, Any] = {
                "timestamp": r.timestamp_ms,
                "input_length": r.input_length,
                "hash_ids": r.hash_ids,
            } | r.extra
            if r.session:
                line["session"] = r.session
            if r.tenant != "default":
                line["tenant"] = r.tenant
            f.write(json.dumps(line) + "\n")


def mix(x: int) -> int:
    """splitmix64's finalizer, as the fleet replay hashes a session to a node."""
    m = (1 << 64) - 1
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & m
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


# The prefill model's flags, passed as given to both `kvtier crossover` (PrefillTime) and
# `kvtier replay`, so that the real fleet's load and the model's are the same model's.
MODEL_FLAGS = ("model", "gpu", "tp", "mfu", "attention_mfu", "dtype")


def model_argv(args: argparse.Namespace) -> list[str]:
    out = []
    for name in MODEL_FLAGS:
        out += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    return out + (["--fp8-compute"] if args.fp8_compute else [])


class PrefillTime:
    """The fleet replay's prefill time of a request (replay_internal::PrefillSecondsWithCache):
    each tier's hits reloaded over its link, the rest recomputed. Its terms come from `kvtier
    crossover --json` with the replay's model flags (model_argv) and each tier's link:
    recompute seconds are a*T + b*T(T+1)/2 (dense, then attention over causal pairs), a reload
    latency + c*T; two prompt lengths give each."""

    TIERS = (kvtier.Tier.G2, kvtier.Tier.G3, kvtier.Tier.G4)

    def __init__(self, args: argparse.Namespace) -> None:
        links = dict(zip(self.TIERS, (args.g2_link, args.g3_link, args.g4_link), strict=True))

        def crossover(tokens: int, link: str) -> dict[str, float]:
            argv = [args.kvtier, "crossover", "--tokens", str(tokens), "--link", link, "--json"]
            argv += model_argv(args)
            out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
            return json.loads(out)  # type: ignore[no-any-return]

        t1, t2 = 1024, 4096
        p1, p2 = t1 * (t1 + 1) / 2, t2 * (t2 + 1) / 2
        self.reload: dict[kvtier.Tier, tuple[float, float]] = {}
        for tier, link in links.items():
            x, y = crossover(t1, link), crossover(t2, link)
            slope = (y["reload_seconds"] - x["reload_seconds"]) / (t2 - t1)
            self.reload[tier] = (x["reload_seconds"] - slope * t1, slope)
        r1, r2 = x["recompute_seconds"], y["recompute_seconds"]
        self.b = (r2 - r1 * t2 / t1) / (p2 - p1 * t2 / t1)
        self.a = (r1 - self.b * p1) / t1

    def seconds(self, tokens: int, served: dict[kvtier.Tier, int]) -> float:
        cached = sum(served.values())
        reload = sum(
            lat + c * n for tier, n in served.items() if n for lat, c in [self.reload[tier]]
        )
        pairs = tokens * (tokens + 1) / 2 - cached * (cached + 1) / 2
        return reload + self.a * (tokens - cached) + self.b * pairs


@dataclass
class NodeClock:
    """A node's prefill server in trace time, as the fleet replay's Node keeps it."""

    free_at: float = 0.0
    load: float = 0.0
    load_time: float = 0.0

    def decayed(self, now: float, half_life: float) -> float:
        if now > self.load_time:
            self.load *= 2 ** (-(now - self.load_time) / half_life)
            self.load_time = now
        return self.load

    def serve(self, now: float, service: float, half_life: float) -> None:
        self.free_at = max(now, self.free_at) + service
        self.load = self.decayed(now, half_life) + service


@dataclass
class Result:
    router: str
    requests: int = 0
    block_references: int = 0
    hits: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0))
    g4_read_blocks: float = 0.0
    g4_written_blocks: float = 0.0
    uploads_unannounced: int = 0
    uploads_cut: int = 0
    reads_missed: int = 0
    puts_failed: int = 0
    first_put_error: str = ""
    wrong_values: int = 0
    per_node_requests: list[int] = field(default_factory=list)
    events: int = 0
    seconds: float = 0.0

    def share(self, source: str) -> float:
        return 100.0 * self.hits[source] / max(1, self.block_references)

    def total(self) -> float:
        return sum(self.share(s) for s in SOURCES)


class Router:
    """The fleet replay's routers (tools/planning/fleet_replay.cc, FleetRun::Route)."""

    def __init__(self, name: str, fleet: Fleet, trace: Trace, args: argparse.Namespace) -> None:
        self.name, self.fleet, self.trace, self.args = name, fleet, trace, args
        self.clocks = [NodeClock() for _ in range(args.nodes)]
        self.session_ids: dict[str, int] = {}
        self.conversation_node: dict[int, int] = {}
        self.seen: set[int] = set()
        self.conversations = 0

    def session_id(self, r: Request) -> int:
        if not r.session:
            return 0
        return self.session_ids.setdefault(r.session, len(self.session_ids) + 1)

    def _session(self, r: Request, ids: list[int]) -> int:
        n = self.args.nodes
        if (s := self.session_id(r)) != 0:
            return mix(s) % n
        if not ids:
            self.conversations += 1
            return (self.conversations - 1) % n
        node = next(
            (self.conversation_node[h] for h in reversed(ids) if h in self.conversation_node), -1
        )
        if node < 0:
            node = self.conversations % n
            self.conversations += 1
        if ids[-1] not in self.seen:
            self.seen.add(ids[-1])
            self.conversation_node[ids[-1]] = node
        self.seen.update(ids[:-1])
        return node

    def route(self, i: int, r: Request, ids: list[int], hashes: list[int], now: float) -> int:
        n, half_life = self.args.nodes, self.args.load_half_life
        first = i % n
        order = [(first + j) % n for j in range(n)]
        if self.name == "round-robin":
            return first
        if self.name == "session":
            return self._session(r, ids)
        if self.name == "least-loaded":
            return min(order, key=lambda k: max(0.0, self.clocks[k].free_at - now))
        loads = [c.decayed(now, half_life) for c in self.clocks]
        mean = sum(loads) / n

        def relative(k: int) -> float:
            return loads[k] / mean if mean > 0 else 0.0

        local = self.fleet.local_prefix_blocks(hashes) if hashes else {}
        held = [local.get(k, 0) for k in range(n)]
        most = max(held)
        if held.count(most) > 1:
            last = self.fleet.last_holder_of(hashes[most:])
            if last is not None and held[last] == most and relative(last) <= self.args.load_cap:
                return last
        tokens = max(1, r.input_length)
        best, best_score = -1, 0.0
        for k in order:
            load = relative(k)
            if load > self.args.load_cap:
                continue
            score = held[k] * self.trace.block_tokens / tokens - load
            if best < 0 or score > best_score:
                best, best_score = k, score
        return best


def run_fleet(
    net: Network,
    args: argparse.Namespace,
    trace: Trace,
    router_name: str,
    s3: str,
    prefill: PrefillTime,
) -> Result:
    """The trace prefix on a fresh fleet under one router."""
    with started(net, args, s3, router_name) as fleet:
        return replay_on(fleet, args, trace, router_name, prefill)


# Per node, what a burst is measured by: the node's G4 reads (objects read), the reads and
# existence checks that joined another request's instead of asking G4, and the checks
# answered by one of the last [shared] exists_cache_ms.
BURST_METRICS = {
    "G4 reads": 'kvtier_tier_hits_total{tier="g4"}',
    "reads joined": "kvtier_g4_reads_coalesced_total",
    "checks joined": "kvtier_g4_checks_coalesced_total",
    "checks cached": "kvtier_g4_checks_cached_total",
}


@dataclass
class Burst:
    blocks: int
    readers: int  # Per node.
    per_node: list[dict[str, float]] = field(default_factory=list)
    minio: dict[str, float] = field(default_factory=dict)  # S3 API -> requests MinIO served.
    lookups_short: int = 0  # Lookups that did not find the whole prompt.
    misses: int = 0
    wrong_values: int = 0
    seconds: float = 0.0

    def reads_per_block_and_node(self) -> float:
        reads = sum(n["G4 reads"] for n in self.per_node)
        return reads / max(1, self.blocks * len(self.per_node))


def minio_requests(net: Network, s3: str) -> dict[str, float]:
    """MinIO's own count of the S3 requests it served, per API (its Prometheus metrics, v3)."""
    url = f"{s3}/minio/metrics/v3/api/requests"
    text = subprocess.run(
        net.exec_argv("s3", ["curl", "-sf", url]), capture_output=True, text=True, check=True
    ).stdout
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("minio_api_requests_total{") and 'name="' in line:
            api = line.split('name="', 1)[1].split('"', 1)[0]
            out[api] = out.get(api, 0.0) + float(line.rpartition(" ")[2])
    return out


def run_burst(net: Network, args: argparse.Namespace, s3: str) -> Burst:
    """--burst: node n{NODES}, outside the fleet (a prefill node, say), stores a prompt of
    --burst blocks, written to G4 on put; then --burst-readers clients on each of the NODES
    nodes, none of which holds it, look it up and read it at the same moment. Single flight
    makes that one G4 read per block and node, whatever the number of readers."""
    res = Burst(args.burst, args.burst_readers)
    with_writer = argparse.Namespace(**{**vars(args), "nodes": args.nodes + 1})
    with started(net, with_writer, s3, "burst") as fleet:
        pool = random.Random(args.seed).randbytes(POOL)
        keys = [kvtier.named_key(f"burst/{i}") for i in range(args.burst)]
        hashes = [block_hash(key) for key in keys]
        values = [value_of(pool, key, args.block_bytes) for key in keys]
        parents = [None, *keys[:-1]]
        fleet.clients[args.nodes].put_many(keys, values, parents=parents, engine_hashes=hashes)
        if fleet.await_events(args.nodes, hashes, hashes):
            raise RuntimeError(f"the burst's prompt was not uploaded within {args.event_wait} s")
        before = [fleet.metrics(k) for k in range(args.nodes)]
        minio_before = minio_requests(net, s3)
        clients = [fleet.client(k) for k in range(args.nodes) for _ in range(args.burst_readers)]
        barrier = threading.Barrier(len(clients))
        lock = threading.Lock()
        errors: list[BaseException] = []

        def read(client: kvtier.Client) -> None:
            try:
                barrier.wait(timeout=60)
                match = client.lookup_prefix(keys)
                got = client.get_many(keys)
            except BaseException as e:  # Raised again below.
                with lock:
                    errors.append(e)
                return
            with lock:
                res.lookups_short += match.num_blocks < len(keys)
                res.misses += sum(v is None for v in got)
                res.wrong_values += sum(
                    v is not None and v != w for v, w in zip(got, values, strict=True)
                )

        threads = [threading.Thread(target=read, args=(c,)) for c in clients]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        res.seconds = time.monotonic() - start
        for c in clients:
            c.close()
        if errors:
            raise RuntimeError(f"{len(errors)} burst readers failed") from errors[0]
        for k in range(args.nodes):
            after = fleet.metrics(k)
            delta = {m: after.get(m, 0.0) - before[k].get(m, 0.0) for m in BURST_METRICS.values()}
            res.per_node.append({what: delta[m] for what, m in BURST_METRICS.items()})
        minio = minio_requests(net, s3)
        res.minio = {api: n - minio_before.get(api, 0.0) for api, n in minio.items()}
    return res


def print_burst(burst: Burst) -> bool:
    blocks, nodes = burst.blocks, len(burst.per_node)
    print(
        f"\n== burst: a {blocks}-block prompt stored by n{nodes} and uploaded to G4; "
        f"{burst.readers} readers on each of {nodes} nodes looked it up and read it at once "
        f"({burst.readers * blocks} block reads asked per node), in {burst.seconds:.2f} s"
    )
    print(f"{'node':8}" + "".join(f"{what:>15}" for what in BURST_METRICS))
    for k, n in enumerate(burst.per_node):
        print(f"{'n' + str(k):8}" + "".join(f"{n[what]:15.0f}" for what in BURST_METRICS))
    asked = {api: n for api, n in sorted(burst.minio.items()) if n}
    per = max(1, blocks * nodes)
    print(
        "MinIO served, by S3 API: "
        + ", ".join(f"{api} {n:.0f} ({n / per:.2f} per block and node)" for api, n in asked.items())
    )
    ok = target(
        "fleet burst G4 reads per block and node", burst.reads_per_block_and_node(), "<=", 1.0
    )
    if burst.wrong_values or burst.misses or burst.lookups_short:
        print(
            f"WRONG: {burst.wrong_values} reads returned other bytes, {burst.misses} found "
            f"nothing, {burst.lookups_short} lookups found less than the whole prompt"
        )
        ok = False
    return ok


def replay_on(
    fleet: Fleet, args: argparse.Namespace, trace: Trace, router_name: str, prefill: PrefillTime
) -> Result:
    router = Router(router_name, fleet, trace, args)
    res = Result(router_name, per_node_requests=[0] * args.nodes)
    pool = random.Random(args.seed).randbytes(POOL)
    bb, bt = args.block_bytes, trace.block_tokens
    t0 = trace.requests[0].timestamp_ms
    start = time.monotonic()
    ids_of: dict[tuple[str, int], int] = {}
    for i, r in enumerate(trace.requests):
        now = (r.timestamp_ms - t0) / 1000
        whole = min(len(r.hash_ids), r.input_length // bt)
        keys = [kvtier.named_key(f"{r.tenant}/{h}") for h in r.hash_ids[:whole]]
        hashes = [block_hash(key) for key in keys]
        ids = [ids_of.setdefault((r.tenant, h), len(ids_of)) for h in r.hash_ids[:whole]]
        if args.cut is not None and i == args.cut[1]:
            fleet.net.link(fleet.names[args.cut[0]], up=False)
        k = router.route(i, r, ids, hashes, now)
        client = fleet.clients[k]
        hits = 0
        served = dict.fromkeys(PrefillTime.TIERS, 0)  # Hit tokens per tier.
        if keys:
            match = client.lookup_prefix(keys)
            hits = match.num_blocks
            for h, tier in zip(hashes, match.tiers, strict=False):
                served[tier] += bt
                if tier == kvtier.Tier.G2:
                    res.hits["own G2"] += 1
                elif tier == kvtier.Tier.G3:
                    res.hits["own G3"] += 1
                else:
                    with fleet.cv:
                        own = fleet.g4_writer.get(h) == k
                    res.hits["G4 (own)" if own else "G4 (other)"] += 1
            # The G3 and G4 hits are read (kvtierd promotes them to G2, as the replay does); a
            # G2 hit is not: the lookup was its access, as it is the replay's, and a second
            # one would let more blocks through G3's admission (two accesses) than there.
            lower = [key for key, t in zip(keys, match.tiers, strict=False) if t != kvtier.Tier.G2]
            for key, v in zip(lower, client.get_many(lower) if lower else [], strict=True):
                # A block gone between the lookup and the read (evicted, or G4 unreachable)
                # is a miss, never other bytes.
                if v is None:
                    res.reads_missed += 1
                elif v != value_of(pool, key, bb):
                    res.wrong_values += 1
            rest = keys[hits:]
            if rest:
                with fleet.cv:
                    for j in range(hits, len(keys)):
                        if hashes[j] not in fleet.parent_of:
                            fleet.parent_of[hashes[j]] = hashes[j - 1] if j else None
                            if j:
                                fleet.children.setdefault(hashes[j - 1], []).append(hashes[j])
                    # What its events will announce: the blocks new to its G2 and to G4.
                    new_here = [h for h in hashes[hits:] if "CPU" not in fleet.held[k].get(h, ())]
                    new_in_g4 = [h for h in hashes[hits:] if h not in fleet.g4_writer]
                try:
                    client.put_many(
                        rest,
                        [value_of(pool, key, bb) for key in rest],
                        parents=[keys[hits - 1] if hits else None] + rest[:-1],
                        session=router.session_id(r),
                        engine_hashes=hashes[hits:],
                    )
                except kvtier.Error as e:  # As the replay, a failed put ends the request's.
                    res.puts_failed += 1
                    res.first_put_error = res.first_put_error or str(e)
                    new_here = new_in_g4 = []
                if args.cut is not None and k == args.cut[0] and i >= args.cut[1]:
                    res.uploads_cut += len(new_in_g4)  # They cannot reach G4.
                    new_in_g4 = []
                res.uploads_unannounced += len(fleet.await_events(k, new_here, new_in_g4))
        res.block_references += len(keys)
        res.per_node_requests[k] += 1
        service = prefill.seconds(r.input_length, served)
        router.clocks[k].serve(now, service, args.load_half_life)
    res.requests = len(trace.requests)
    res.seconds = time.monotonic() - start
    for k in range(args.nodes):
        m = fleet.metrics(k)
        res.g4_read_blocks += m.get("kvtier_g4_read_bytes_total", 0.0) / bb
        res.g4_written_blocks += m.get("kvtier_g4_written_bytes_total", 0.0) / bb
    res.events = fleet.events
    return res


def replay_model(
    args: argparse.Namespace, prefix: Path, router: str, block_bytes: int
) -> dict[str, Any]:
    """`kvtier replay --nodes` of the prefix: the model's prediction of the real fleet."""
    argv = [args.kvtier, "replay", str(prefix), "--nodes", str(args.nodes), "--router", router]
    argv += ["--capacity", f"{args.g2_blocks * block_bytes}B"]
    argv += ["--g3-capacity", f"{args.g3_blocks * block_bytes}B", "--g4", "on_put", "--json"]
    argv += ["--load-cap", str(args.load_cap), "--load-half-life", str(args.load_half_life)]
    argv += ["--g2-link", args.g2_link, "--g3-link", args.g3_link, "--g4-link", args.g4_link]
    argv += model_argv(args)
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"fleet_bench: {' '.join(argv)} failed: {out.stderr.strip()}")
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def compare(real: Result, model: dict[str, Any]) -> tuple[str, float, float]:
    """The side-by-side table; the largest difference of hit ratios (points, per source and in
    all), and the fleet's G4 traffic (reads and writes) over the replay's."""
    refs = max(1, model["block_references"])
    bb = model["block_bytes"]
    rows = [f"{'':22}{'real':>10}{'replay':>10}{'diff':>10}"]
    shares = {s: (real.share(s), 100.0 * model["hit_blocks"][s] / refs) for s in SOURCES}
    shares["all"] = (real.total(), sum(m for _, m in shares.values()))
    for source, (got, want) in shares.items():
        rows.append(f"{source + ' hits, %':22}{got:10.2f}{want:10.2f}{got - want:+10.2f}")
    traffic = {"read": (real.g4_read_blocks, model["g4"]["bytes_read"] / bb)}
    traffic["written"] = (real.g4_written_blocks, model["g4"]["bytes_written"] / bb)
    traffic["in all"] = (sum(t[0] for t in traffic.values()), sum(t[1] for t in traffic.values()))
    for what, (got, want) in traffic.items():
        ratio = got / want if want else (1.0 if got == 0 else float("inf"))
        rows.append(f"{'G4 ' + what + ', blocks':22}{got:10.0f}{want:10.0f}{ratio:9.2f}x")
    worst = max(abs(got - want) for got, want in shares.values())
    return "\n".join(rows), worst, ratio  # The last ratio: reads and writes in all.


@contextmanager
def fleet_network(args: argparse.Namespace) -> Iterator[tuple[Network, str]]:
    with Network(tag=str(os.getpid() % 100000), dir=args.out) as net:
        s3_address = net.add_host("s3", 1)
        for k in range(args.nodes + (args.burst > 0)):  # The burst's writer is one more.
            net.add_host(f"n{k}", 2 + k)
        buckets = [f"{BUCKET}-{run}" for run in [*args.routers, "burst"]]
        yield net, net.start_minio("s3", s3_address, args.out / "minio", buckets)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("build", type=Path, help="the release build (build/release)")
    p.add_argument(
        "trace",
        type=Path,
        nargs="?",
        help="Mooncake or kvtier JSONL trace (default: a generated agentic trace, seed --seed)",
    )
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--requests", type=int, default=400, help="the trace's first N requests")
    p.add_argument(
        "--routers", default="kv-aware,session,round-robin", help='"" runs only the burst'
    )
    p.add_argument("--block-bytes", type=int, default=32 << 10, help="scaled-down block size")
    p.add_argument("--g2-blocks", type=int, default=384, help="G2 per node, in blocks")
    p.add_argument("--g3-blocks", type=int, default=1024, help="G3 per node, in blocks")
    p.add_argument("--link", default="1gbit", help="each node's link (tc rate), both ways")
    p.add_argument("--load-cap", type=float, default=1.2)
    p.add_argument("--load-half-life", type=float, default=300.0)
    p.add_argument("--block-tokens", type=int, default=512, help="of a trace without header")
    m = p.add_argument_group("the prefill model (as `kvtier replay`'s flags of the same names)")
    m.add_argument("--model", default="llama-3.1-70b")
    m.add_argument("--gpu", default="h100")
    m.add_argument("--tp", type=int, default=1)
    m.add_argument("--mfu", type=float, default=0.5)
    m.add_argument("--attention-mfu", type=float, default=0.0)
    m.add_argument("--dtype", default="bf16")
    m.add_argument("--fp8-compute", action="store_true")
    m.add_argument("--g2-link", default="pcie-gen5")
    m.add_argument("--g3-link", default="nvme-gen5")
    m.add_argument("--g4-link", default="400gbe")
    p.add_argument("--event-wait", type=float, default=10.0, help="seconds, per request")
    p.add_argument(
        "--cut",
        metavar="NODE:REQUEST",
        help="cut node NODE's link (to G4 and the other nodes) before request REQUEST",
    )
    p.add_argument(
        "--burst", type=int, default=64, help="blocks of the burst's prompt (0: no burst)"
    )
    p.add_argument("--burst-readers", type=int, default=16, help="the burst's readers per node")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, help="results and logs (default: a new temp dir)")
    p.add_argument("--json", action="store_true", help="also print the results as JSON")
    p.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = p.parse_args(argv)
    args.kvtierd = os.environ.get("KVTIERD") or str(args.build / "src/server/kvtierd")
    args.kvtier = os.environ.get("KVTIER_CLI") or str(args.build / "tools/kvtier")
    args.routers = [r for r in args.routers.split(",") if r]
    for router in args.routers:
        if router not in ROUTERS:
            p.error(f"unknown router {router!r}: one of {', '.join(ROUTERS)}")
    if not 1 <= args.nodes <= 200:
        p.error("--nodes must be 1 to 200")
    if args.block_bytes % 4096 or not 4096 <= args.block_bytes <= POOL // 2:
        p.error(f"--block-bytes must be a multiple of 4096 from 4096 to {POOL // 2}")
    if args.cut is not None:
        try:
            node, request = (int(x) for x in args.cut.split(":"))
        except ValueError:
            p.error(f"--cut {args.cut!r}: give NODE:REQUEST, e.g. 1:200")
        if not (0 <= node < args.nodes and 0 <= request < args.requests):
            p.error(f"--cut {args.cut!r}: node 0 to {args.nodes - 1}, request below --requests")
        args.cut = (node, request)
    if min(args.g2_blocks, args.g3_blocks, args.requests, args.burst_readers) < 1:
        p.error("--g2-blocks, --g3-blocks, --requests and --burst-readers must be at least 1")
    if not 0 <= args.burst <= args.g2_blocks:
        p.error(f"--burst must be 0 to --g2-blocks ({args.g2_blocks}): the writer's G2 holds it")
    if not (args.routers or args.burst):
        p.error('nothing to run: --routers "" and --burst 0')
    for path in (args.kvtierd, args.kvtier):
        if not os.access(path, os.X_OK):
            p.error(f"no {path}: build it (scripts/test does), or give its build")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # A kill leaves nothing behind: the namespaces and processes go with the `with` blocks.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.out = args.out or Path(tempfile.mkdtemp(prefix="kvtier-fleet-"))
    args.out.mkdir(parents=True, exist_ok=True)
    if args.trace is None:
        args.trace = args.out / "agentic.jsonl"
        subprocess.run(
            [args.kvtier, "trace", "gen", "--workload", "agentic", "--sessions", "100"]
            + ["--seed", str(args.seed), "--max-requests", str(args.requests)]
            + ["--out", str(args.trace)],
            check=True,
            capture_output=True,
        )
    trace = read_trace(args.trace, args.requests, args.block_tokens)
    if (why := missing(("ip", "tc", "curl"))) is not None:
        print(f"fleet_bench: cannot run: {why}", file=sys.stderr)
        return 2
    prefix = args.out / "prefix.jsonl"
    write_trace(trace, prefix)
    if len(trace.requests) < args.nodes:
        print(
            f"fleet_bench: {len(trace.requests)} requests cannot fill {args.nodes} nodes; "
            "some stay idle",
            file=sys.stderr,
        )
    print(
        f"fleet_bench: {args.nodes} nodes, {len(trace.requests)} requests of {args.trace}, "
        f"{args.block_bytes >> 10} KiB blocks, G2 {args.g2_blocks} and G3 {args.g3_blocks} "
        f"blocks per node, links {args.link}, G4 on MinIO; results in {args.out}"
    )
    prefill = PrefillTime(args)
    results: list[dict[str, Any]] = []
    all_ok = True
    with fleet_network(args) as (net, s3):
        for router in args.routers:
            # The replay's blocks are the model's real size: a first run says how large.
            probe = replay_model(args, prefix, router, (4 << 40) // args.g2_blocks)
            model = replay_model(args, prefix, router, probe["block_bytes"])
            real = run_fleet(net, args, trace, router, s3, prefill)
            table, worst, traffic = compare(real, model)
            print(
                f"\n== {router}: {real.requests} requests, {real.block_references} block "
                f"references in {real.seconds:.1f} s ({real.events} KV events); per node "
                f"{real.per_node_requests} requests (replay: "
                f"{[n['requests'] for n in model['per_node']]})"
            )
            print(table)
            why_not = ""
            if args.cut is not None:
                why_not = f"node n{args.cut[0]} cut from G4 (the replay assumes every link up)"
                print(
                    f"degraded: node n{args.cut[0]}'s link cut at request {args.cut[1]}: "
                    f"{real.uploads_cut} of its puts never reached G4, {real.reads_missed} "
                    "reads of blocks looked up found none"
                )
            if real.uploads_unannounced:
                print(
                    f"degraded: {real.uploads_unannounced} uploads not announced within "
                    f"{args.event_wait} s (a node's link to G4 is slow or cut)"
                )
            ok = target(
                f"fleet {router} hits, real off replay", worst, "<=", HIT_POINTS, " pts", why_not
            )
            ok &= target(
                f"fleet {router} G4 traffic, real off replay",
                100 * abs(traffic - 1),
                "<=",
                100 * TRAFFIC_SHARE,
                "%",
                why_not,
            )
            if real.wrong_values:
                print(f"WRONG: {real.wrong_values} reads returned other bytes than stored")
                ok = False
            all_ok &= ok
            results.append({"router": router, "real": real.__dict__, "replay": model, "ok": ok})
        if args.burst:
            burst = run_burst(net, args, s3)
            ok = print_burst(burst)
            all_ok &= ok
            results.append({"burst": burst.__dict__, "ok": ok})
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    if args.json:
        print(json.dumps(results, indent=2))
    return 1 if args.check and not all_ok else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
