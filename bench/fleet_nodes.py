"""The fleet of bench/fleet_bench.py: NODES kvtierd in network namespaces of their own behind
rate-limited links, G4 on one bucket of MinIO, and what their KV events say each node holds,
kept in Dynamo's KV router index (dynamo._core.RadixTree, ai-dynamo-runtime)."""

from __future__ import annotations

import argparse
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import zmq
from netns import MINIO_PASSWORD, MINIO_USER, Network, wait_for

import kvtier

BUCKET = "fleet"
POOL = 4 << 20  # Random bytes every value is a slice of.


def block_hash(key: bytes) -> int:
    """A block's name in the KV events and in the router's index: its key's first 8 bytes,
    sent as the engine hash of its put, so that every event of it (promotions on other nodes
    included, which carry the 32-byte key) names it the same way."""
    return int.from_bytes(key[:8], "little")


class Fleet:
    """NODES kvtierd behind rate-limited links, one bucket of MinIO as their G4, and what
    their KV events say each holds."""

    def __init__(self, net: Network, args: argparse.Namespace, s3: str, run: str) -> None:
        self.net, self.args = net, args
        self.clients: list[kvtier.Client] = []
        self.http: list[str] = []
        self.names: list[str] = []
        self.sockets: list[str] = []
        self.ctx = zmq.Context()
        self.subs: list[zmq.Socket[bytes]] = []
        self.cv = threading.Condition()
        # Per node: hash -> media ("CPU", "DISK") its events say hold it.
        self.held: list[dict[int, set[str]]] = []
        self.stored_seen: list[set[int]] = []  # CPU BlockStored seen since the last clear.
        self.last_holder: dict[int, int] = {}  # hash -> the node whose G2 stored it last.
        self.g4_writer: dict[int, int] = {}  # hash -> the node that announced its upload.
        self.parent_of: dict[int, int | None] = {}  # hash -> the block before it.
        self.children: dict[int, list[int]] = {}  # hash -> the blocks after it.
        self.in_tree: list[set[int]] = []  # Per node: its blocks in Dynamo's tree.
        self.event_ids: list[int] = []
        self.events = 0
        self.error: BaseException | None = None
        from dynamo._core import RadixTree  # Dynamo's KV router index.

        self.index = RadixTree()
        for k in range(args.nodes):
            self._start_node(k, s3, run)
        self.stop = False
        self.thread = threading.Thread(target=self._receive, daemon=True)
        self.thread.start()

    def _start_node(self, k: int, s3: str, run: str) -> None:
        name = f"n{k}"
        d = self.net.dir / run / name
        d.mkdir(parents=True)
        bb = self.args.block_bytes
        # G3 holds --g3-blocks records: each takes a 4 KiB page beyond its block (its header;
        # records are page-aligned), and G3 makes room a whole segment at a time.
        segment = max(bb + 4096, self.args.g3_blocks * (bb + 4096) // 32 // 4096 * 4096)
        g3 = self.args.g3_blocks * (bb + 4096) + segment
        (d / "kvtierd.toml").write_text(
            f'data_dir = "{d}"\n[server]\nnative_listen = "127.0.0.1:0"\nresp_listen = ""\n'
            'http_listen = "127.0.0.1:0"\nunix_socket = "kvtierd.sock"\nthreads = 2\n'
            f'[memory]\ncapacity = "{self.args.g2_blocks * bb}"\nwarm_restart = false\n'
            f'[disk]\ndir = "disk"\ncapacity = "{g3}"\n'
            f'segment_bytes = "{segment}"\ncompress = false\n'
            f'[shared]\nlocation = "s3://{BUCKET}-{run}"\ns3_endpoint = "{s3}"\n'
            f's3_access_key = "{MINIO_USER}"\ns3_secret_key = "{MINIO_PASSWORD}"\n'
            f'node_id = "{name}"\nwrite_policy = "on_put"\ncompress = false\n'
            "janitor_interval_seconds = 0\ns3_connect_timeout_ms = 1000\n"
            "s3_request_timeout_ms = 5000\ns3_max_retries = 1\n"
            f'[events]\nenabled = true\nendpoint = "ipc://{d}/events"\n'
            f'replay_endpoint = ""\nbatch_ms = 2\n'
            f'[store]\nmax_block_bytes = "{bb}"\n'
        )
        sub = self.ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.setsockopt(zmq.RECONNECT_IVL, 10)
        monitor = sub.get_monitor_socket(zmq.EVENT_CONNECTED)
        sub.connect(f"ipc://{d}/events")
        self.subs.append(sub)
        self.held.append({})
        self.in_tree.append(set())
        self.stored_seen.append(set())
        self.event_ids.append(0)
        proc = self.net.spawn(
            name,
            [
                self.args.kvtierd,
                "--config",
                str(d / "kvtierd.toml"),
                "--port-file",
                str(d / "ports"),
            ],
            log=f"{run}-{name}",
        )

        def serving() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"kvtierd {name} exited: see {self.net.dir}/{run}-{name}.log")
            return (d / "ports").exists()

        wait_for(serving, f"kvtierd {name} serving")
        ports = dict(line.split("=", 1) for line in (d / "ports").read_text().split())
        self.http.append(f"127.0.0.1:{ports['http_port']}")
        self.names.append(name)
        self.sockets.append(f"unix://{d}/kvtierd.sock")
        self.clients.append(self.client(k))
        self.net.limit(name, self.args.link)
        # Subscribed before the first request, so that no event of it is missed.
        if not monitor.poll(60_000):
            raise TimeoutError(f"no connection to kvtierd {name}'s KV events")
        sub.disable_monitor()
        monitor.close(linger=0)

    def client(self, k: int) -> kvtier.Client:
        return kvtier.Client(self.sockets[k], retry_timeout=0, io_timeout=60)

    def close(self) -> None:
        self.stop = True
        self.thread.join()
        for c in self.clients:
            c.close()
        for s in self.subs:
            s.close(linger=0)
        self.ctx.term()

    # The KV events: vLLM's KVEventBatch [ts, [event, ...], dp_rank], each event a map
    # (src/server/kv_events.h).
    def _receive(self) -> None:
        poller = zmq.Poller()
        for s in self.subs:
            poller.register(s, zmq.POLLIN)
        try:
            while not self.stop:
                for sock, _ in poller.poll(50):
                    k = self.subs.index(sock)
                    _, _, payload = sock.recv_multipart()
                    batch = msgspec.msgpack.decode(payload)
                    with self.cv:
                        for event in batch[1]:
                            self._apply(k, event)
                        self.cv.notify_all()
        except BaseException as e:  # Raised again in the main thread by await_events.
            with self.cv:
                self.error = e
                self.cv.notify_all()

    def _dynamo(self, k: int, data: Any) -> None:
        self.event_ids[k] += 1
        body = json.dumps({"event_id": self.event_ids[k], "data": data}).encode()
        self.index.apply_event(k, body)  # Refuses what _index_add/_remove never send.

    def _apply(self, k: int, event: Any) -> None:
        self.events += 1
        kind, hashes, medium = event["type"], event.get("block_hashes", []), event.get("medium")
        names = [h if isinstance(h, int) else block_hash(h) for h in hashes]
        held = self.held[k]
        if kind == "AllBlocksCleared":
            held.clear()
            self.in_tree[k].clear()
            self.index.clear_all_blocks(k)
        elif kind == "BlockStored" and medium == "EXTERNAL":
            for h in names:
                self.g4_writer.setdefault(h, k)
        elif kind == "BlockStored":
            if medium == "CPU":
                self.stored_seen[k].update(names)
                self.last_holder.update(dict.fromkeys(names, k))
            for h in names:
                held.setdefault(h, set()).add(medium)
                self._index_add(k, h)
        elif kind == "BlockRemoved" and medium == "EXTERNAL":
            for h in names:
                self.g4_writer.pop(h, None)
        elif kind == "BlockRemoved":
            for h in names:
                media = held.get(h)
                if media is not None:
                    media.discard(medium)
                    if not media:
                        del held[h]
                        self._index_remove(k, h)

    # Dynamo's tree holds a block of a worker only under its parent, and drops a block's
    # descendants with it. Node k's tree is kept equal to the blocks of its G2 and G3 whose
    # every ancestor it holds too: a block is added under its parent in the prompt it came
    # from (G3's events name no parent; the router knows the prompts), then its held
    # descendants (a block demoted from G2 leaves G2 before it reaches G3; its descendants
    # come back with it).
    def _index_add(self, k: int, h: int) -> None:
        tree = self.in_tree[k]
        parent = self.parent_of.get(h)
        if h in tree or (parent is not None and parent not in tree):
            return
        todo = [h]
        while todo:
            x = todo.pop()
            block = {"block_hash": x, "tokens_hash": x}
            self._dynamo(k, {"stored": {"parent_hash": self.parent_of.get(x), "blocks": [block]}})
            tree.add(x)
            todo += [c for c in self.children.get(x, ()) if c in self.held[k] and c not in tree]

    def _index_remove(self, k: int, h: int) -> None:
        tree = self.in_tree[k]
        if h not in tree:
            return
        self._dynamo(k, {"removed": {"block_hashes": [h]}})
        todo = [h]
        while todo:
            x = todo.pop()
            tree.discard(x)
            todo += [c for c in self.children.get(x, ()) if c in tree]

    def local_prefix_blocks(self, hashes: list[int]) -> dict[int, int]:
        """Per node, the leading blocks it holds in G2 or G3, by Dynamo's index."""
        with self.cv:
            scores = self.index.find_matches(hashes).scores
        return {worker: blocks for (worker, _), blocks in scores.items()}

    def last_holder_of(self, hashes: list[int]) -> int | None:
        """The node whose events last said its G2 stored the deepest of `hashes` that any
        node's did, or None."""
        with self.cv:
            return next(
                (self.last_holder[h] for h in reversed(hashes) if h in self.last_holder), None
            )

    def await_events(self, k: int, stored: list[int], uploaded: list[int]) -> list[int]:
        """Waits until node k's events announced `stored` in G2 and `uploaded` in G4 (by any
        node); returns the uploads still unannounced at --event-wait."""
        deadline = time.monotonic() + self.args.event_wait
        with self.cv:
            while True:
                if self.error is not None:
                    raise RuntimeError("reading the KV events failed") from self.error
                seen = self.stored_seen[k]
                late = [h for h in uploaded if h not in self.g4_writer]
                if all(h in seen for h in stored) and not late:
                    seen.clear()
                    return []
                left = deadline - time.monotonic()
                if left <= 0:
                    seen.clear()
                    return late
                self.cv.wait(left)

    def metrics(self, k: int) -> dict[str, float]:
        """Node k's /metrics (its HTTP listener is inside its namespace)."""
        url = f"http://{self.http[k]}/metrics"
        text = subprocess.run(
            self.net.exec_argv(self.names[k], ["curl", "-sf", url]),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = out.get(name, 0.0) + float(value)
        return out


def value_of(pool: bytes, key: bytes, size: int) -> bytes:
    offset = int.from_bytes(key[8:16], "little") % (len(pool) - size)
    return pool[offset : offset + size]


@contextmanager
def started(net: Network, args: argparse.Namespace, s3: str, run: str) -> Iterator[Fleet]:
    """A fresh fleet of args.nodes (new daemons, a new G4 prefix), stopped cleanly after."""
    fleet = Fleet(net, args, s3, run)
    try:
        yield fleet
    finally:
        fleet.close()
        for _ in range(args.nodes):  # A clean stop: kvtierd removes its G2 arena.
            proc = net.procs.pop()
            proc.terminate()
            proc.wait(timeout=60)
