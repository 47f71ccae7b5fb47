"""kvtierd's KV events ([events]), read as a KV-aware router reads vLLM's: a ZMQ SUB socket,
vLLM's own decoder (vllm.distributed.kv_events.KVEventBatch, vllm 0.33.0), the replay
socket for what the subscriber missed, and a snapshot of what kvtierd holds for a router that
comes late."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import msgspec
import zmq
from botocore.config import Config
from conftest import DEADLINE, Daemon
from vllm.distributed.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
)

import kvtier

BLOCK = 256 << 10
END_SEQ = b"\xff" * 8
TENANTS = 3  # conftest's Daemon: default, acme, other.
MEDIA = ("CPU", "DISK", "EXTERNAL")
DECODER = msgspec.msgpack.Decoder(type=KVEventBatch)


def start_daemon(make_daemon: Any, tmp_path: Path) -> Daemon:
    """A kvtierd with events, a 4 MiB G2, G3, and G4 in a directory (uploads on put)."""
    g4 = tmp_path / "g4"
    g4.mkdir()
    return make_daemon(
        extra="[events]\nenabled = true\n"
        'endpoint = "tcp://127.0.0.1:*"\nreplay_endpoint = "tcp://127.0.0.1:*"\n'
        "batch_ms = 5\n"
        '[disk]\ndir = "disk"\n'
        '[shared]\nlocation = "' + str(g4) + '"\nwrite_policy = "on_put"\n'
        "[admission]\nfrequency_gate = false\n"
        '[store]\nmax_block_bytes = "1MiB"\npromote_on_hit = false\n',
        memory="4MiB",
    )


class Router:
    """Subscribes to every topic and keeps each message by sequence number."""

    def __init__(self, endpoint: str, replay: str) -> None:
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(endpoint)
        self.replay_endpoint = replay
        self.live: dict[int, tuple[str, bytes]] = {}

    def receive(self, until: Callable[[], bool]) -> None:
        """Reads live messages until `until()` holds (bounded)."""
        deadline = time.monotonic() + DEADLINE
        while not until():
            assert time.monotonic() < deadline, "the awaited events never came"
            if self.sub.poll(100):
                topic, seq, payload = self.sub.recv_multipart()
                self.live[int.from_bytes(seq, "big")] = (topic.decode(), payload)

    def replay(self, start: int) -> dict[int, tuple[str, bytes]]:
        """Asks the replay socket for every kept message from `start` on."""
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.connect(self.replay_endpoint)
        dealer.send_multipart([b"", start.to_bytes(8, "big")])
        got: dict[int, tuple[str, bytes]] = {}
        while True:
            assert dealer.poll(DEADLINE * 1000), "no replay answer"
            empty, topic, seq, payload = dealer.recv_multipart()
            assert empty == b""
            if seq == END_SEQ:
                assert topic == b"" and payload == b""
                break
            got[int.from_bytes(seq, "big")] = (topic.decode(), payload)
        dealer.close()
        return got

    def snapshot(self) -> tuple[int, dict[int, tuple[str, bytes]]]:
        """Asks the replay socket for a snapshot: its batches (numbered from 0 in the order they
        came) and the first live sequence number to apply after them."""
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.connect(self.replay_endpoint)
        dealer.send_multipart([b"", b"kvtier-snapshot"])
        got: dict[int, tuple[str, bytes]] = {}
        seqs: set[bytes] = set()
        while True:
            assert dealer.poll(DEADLINE * 1000), "no snapshot answer"
            empty, topic, seq, payload = dealer.recv_multipart()
            assert empty == b""
            if seq == END_SEQ:
                break
            seqs.add(seq)
            got[len(got)] = (topic.decode(), payload)
        dealer.close()
        assert len(seqs) == 1, "every batch of a snapshot carries the same seq"
        return int.from_bytes(seqs.pop(), "big"), got

    def wait_for_probe(self, put: Callable[[bytes], None]) -> None:
        """Puts probe blocks until a live message arrives: a SUB socket joins asynchronously
        and misses what came before."""
        probes = iter(range(1000))

        def probed() -> bool:
            if self.live:
                return True
            put(key(next(probes), b"p"))
            return False

        self.receive(probed)

    def close(self) -> None:
        self.sub.close()
        self.ctx.term()


def events_of(messages: dict[int, tuple[str, bytes]], topic: str) -> list[Any]:
    out: list[Any] = []
    for seq in sorted(messages):
        t, payload = messages[seq]
        if t == topic:
            batch = DECODER.decode(payload)
            assert batch.ts > 0 and batch.data_parallel_rank is None
            out.extend(batch.events)
    return out


def stored(events: list[Any], medium: str) -> dict[Any, Any]:
    """Each block a BlockStored of `medium` names, with its parent."""
    out: dict[Any, Any] = {}
    for e in events:
        if isinstance(e, BlockStored) and e.medium == medium:
            assert e.token_ids == [] and e.lora_id is None and e.lora_name is None
            parent = e.parent_block_hash
            for h in e.block_hashes:
                out[h] = parent
                parent = h
    return out


def removed(events: list[Any], medium: str) -> set[Any]:
    return {
        h
        for e in events
        if isinstance(e, BlockRemoved) and e.medium == medium
        for h in e.block_hashes
    }


def view(messages: dict[int, tuple[str, bytes]], topic: str) -> dict[str, set[Any]]:
    """What a router knows of one tenant after applying `messages` in order: per medium, the
    blocks held."""
    held: dict[str, set[Any]] = {m: set() for m in MEDIA}
    for e in events_of(messages, topic):
        if isinstance(e, AllBlocksCleared):
            for blocks in held.values():
                blocks.clear()
        elif isinstance(e, BlockStored):
            held[e.medium].update(e.block_hashes)
        elif isinstance(e, BlockRemoved):
            held[e.medium].difference_update(e.block_hashes)
    return held


def metric(d: Daemon, name: str) -> float:
    samples = d.metrics()
    assert name in samples, f"{name} not in /metrics"
    return samples[name]


def wait_for_messages(d: Daemon, n: int) -> None:
    """Returns once kvtierd has sent `n` KV-event messages (bounded)."""
    deadline = time.monotonic() + DEADLINE
    while metric(d, "kvtier_events_messages_total") < n:
        assert time.monotonic() < deadline, "kvtierd sent no events"
        time.sleep(0.01)  # Polling kvtierd's counter, bounded.


def key(i: int, salt: bytes = b"") -> bytes:
    return (salt + i.to_bytes(4, "big")).rjust(32, b"k")


def test_routers_see_every_tier_in_vllms_format_and_catch_up_by_replay(
    make_daemon: Any, tmp_path: Path
) -> None:
    d = start_daemon(make_daemon, tmp_path)
    acme = kvtier.Client(d.unix_url, "acme-token")
    other = kvtier.Client(d.unix_url, "other-token")
    value = bytes(BLOCK)
    chain = [key(i) for i in range(3)]
    # The engine's own block hashes (vLLM's: 64-bit ints, or bytes) name the chain in events.
    names: list[int | bytes] = [101, 2**64 - 1, b"engine-hash-3"]
    # Before any router subscribes: a prompt's chain of three blocks, and another tenant's.
    acme.put_many(chain, [value] * 3, chain=True, engine_hashes=names)
    other.put(key(0, b"o"), value)

    # Start-up's announcement (a message per tenant) and both puts (two topics, two messages)
    # went out before the router connects: it misses them.
    wait_for_messages(d, TENANTS + 2)
    router = Router(d.ports["events_endpoint"], d.ports["events_replay_endpoint"])
    try:
        router.wait_for_probe(lambda k: acme.put(k, value))
        assert min(router.live) >= TENANTS + 2, "the router cannot have seen the first messages"
        replayed = router.replay(0)
        assert min(replayed) == 0
        for seq, message in router.live.items():
            if seq in replayed:
                assert replayed[seq] == message, f"replay of {seq} differs from the live message"

        # G2 fills: the chain is evicted to G3 (CPU removed, DISK stored). G4 got it on put.
        fillers = [key(i, b"f") for i in range(24)]
        acme.put_many(fillers, [value] * len(fillers))

        def seen() -> dict[int, tuple[str, bytes]]:
            return {**replayed, **router.live}

        def acme_events() -> list[Any]:
            return events_of(seen(), "kvtier.acme")

        router.receive(lambda: set(names) <= set(stored(acme_events(), "DISK")))
        events = acme_events()
        assert stored(events, "CPU")[names[0]] is None
        assert stored(events, "CPU")[names[1]] == names[0]
        assert stored(events, "CPU")[names[2]] == names[1]
        assert set(names) <= set(stored(events, "EXTERNAL"))
        assert set(names) <= removed(events, "CPU")
        assert not set(chain) & set(stored(events, "CPU")), "named by key, not engine hash"
        # Blocks put without one are named by their kvtier keys.
        assert set(fillers[:4]) <= set(stored(events, "CPU"))
        # The other tenant's block went out on its own topic, and only there.
        assert key(0, b"o") in stored(events_of(seen(), "kvtier.other"), "CPU")
        assert key(0, b"o") not in stored(events, "CPU")

        # Deleting a block removes it from every tier that held it; deleting the tenant
        # clears it.
        assert acme.delete(chain[2])
        # Each tier's removal may come in its own message: wait for both.
        router.receive(
            lambda: (
                names[2] in removed(acme_events(), "DISK")
                and names[2] in removed(acme_events(), "EXTERNAL")
            )
        )
        acme.delete_all()
        # The start-up announcement cleared the tenant once; the deletion clears it again.
        router.receive(lambda: sum(isinstance(e, AllBlocksCleared) for e in acme_events()) == 2)

        # Sequence numbers run over all topics without a gap, from 0: nothing was lost.
        assert sorted(seen()) == list(range(max(seen()) + 1))
        # And a late router gets all of it from the replay socket alone.
        assert router.replay(0).keys() == seen().keys()
    finally:
        router.close()
        acme.close()
        other.close()


def test_a_late_router_gets_a_snapshot_and_ends_with_the_view_of_one_there_from_the_start(
    make_daemon: Any, tmp_path: Path
) -> None:
    d = start_daemon(make_daemon, tmp_path)
    acme = kvtier.Client(d.unix_url, "acme-token")
    other = kvtier.Client(d.unix_url, "other-token")
    value = bytes(BLOCK)
    chain = [key(i) for i in range(3)]
    names: list[int | bytes] = [7, 8, b"engine-hash-9"]
    # Before the late router: a named chain, fillers that push it to G3, another tenant's
    # block, a deletion.
    acme.put_many(chain, [value] * 3, chain=True, engine_hashes=names)
    fillers = [key(i, b"f") for i in range(20)]
    acme.put_many(fillers, [value] * len(fillers))
    other.put(key(0, b"o"), value)
    acme.delete(fillers[-1])

    late = Router(d.ports["events_endpoint"], d.ports["events_replay_endpoint"])
    try:
        late.wait_for_probe(lambda k: acme.put(k, value))
        start, snapshot = late.snapshot()
        assert start > min(late.live), "the snapshot comes after the first live message"
        # After the snapshot was asked for: more blocks (G2 evicts to G3 again), a deletion, a
        # session's blocks and the session's deletion (G4 names the keys it removed).
        more = [key(i, b"m") for i in range(12)]
        acme.put_many(more, [value] * len(more))
        acme.delete(more[0])
        session = [key(i, b"s") for i in range(4)]
        acme.put_many(session, [value] * len(session), session=77)
        # Uploaded to G4 (on put) before the deletion, so that G4 has them to remove.
        late.receive(
            lambda: set(session) <= set(stored(events_of(late.live, "kvtier.acme"), "EXTERNAL"))
        )
        assert acme.delete_session(77).memory_blocks == len(session)
        late.receive(
            lambda: set(session) <= removed(events_of(late.live, "kvtier.acme"), "EXTERNAL")
        )

        # A router there from the start saw every message (the replay keeps them all); the
        # late one applies the snapshot, then the live messages from `start` to the same end.
        early = late.replay(0)
        end = max(early)
        assert sorted(early) == list(range(end + 1))
        late.receive(lambda: max(late.live) >= end)
        caught_up = dict(snapshot)
        for seq in range(start, end + 1):
            caught_up[len(snapshot) + seq] = late.live[seq]
        for tenant in ("default", "acme", "other"):
            topic = "kvtier." + tenant
            want, got = view(early, topic), view(caught_up, topic)
            # G4 is the cluster's and no node lists it: the snapshot says what this node holds.
            for medium in ("CPU", "DISK"):
                assert got[medium] == want[medium], f"{tenant} {medium}"
        acme_view = view(early, "kvtier.acme")
        assert acme_view["CPU"] and acme_view["DISK"], "both tiers hold blocks"
        assert set(names) <= acme_view["DISK"], "the chain is in G3, named as the engine named it"
        assert fillers[-1] not in acme_view["CPU"] | acme_view["DISK"]
        assert key(0, b"o") in view(early, "kvtier.other")["CPU"]
        # The session's deletion removed its blocks from G4, by key.
        acme_events = events_of(early, "kvtier.acme")
        assert set(session) <= set(stored(acme_events, "EXTERNAL"))
        assert set(session) <= removed(acme_events, "EXTERNAL")
        assert not set(session) & acme_view["EXTERNAL"]
        assert metric(d, "kvtier_events_snapshots_total") == 1
    finally:
        late.close()
        acme.close()
        other.close()


def test_a_restarted_kvtierd_announces_what_g2_adopted_and_g3_recovered(
    make_daemon: Any, tmp_path: Path
) -> None:
    d = start_daemon(make_daemon, tmp_path)
    acme = kvtier.Client(d.unix_url, "acme-token")
    value = bytes(BLOCK)
    blocks = [key(i) for i in range(24)]
    for begin in range(0, len(blocks), 4):  # Chains of four: one fits in G2 at a time.
        acme.put_many(blocks[begin : begin + 4], [value] * 4, chain=True)
    acme.delete(blocks[5])
    acme.close()
    assert d.stop() == 0
    d.start()

    router = Router(d.ports["events_endpoint"], d.ports["events_replay_endpoint"])
    try:
        # The announcement went out before anything else, and stays in the replay buffer.
        wait_for_messages(d, TENANTS)
        announced = router.replay(0)
        acme_events = events_of(announced, "kvtier.acme")
        assert isinstance(acme_events[0], AllBlocksCleared)
        held = view(announced, "kvtier.acme")
        assert held["CPU"] and held["DISK"], "G2 kept some blocks and G3 the others"
        assert held["CPU"] | held["DISK"] == set(blocks) - {blocks[5]}
        # G2's adopted chains keep their order: each block after its parent.
        parents = stored(acme_events, "CPU")
        for b, parent in parents.items():
            if parent is not None:
                assert blocks.index(parent) == blocks.index(b) - 1
                assert blocks.index(b) % 4 != 0, "a chain's head has no parent"
        assert any(p is not None for p in parents.values())
    finally:
        router.close()


def test_s3_objects_are_announced_as_blocks_are(make_daemon: Any) -> None:
    """An S3 object is a Store value: a router sees it stored, and removed once deleted. The
    same bytes put again are a no-op and announce nothing."""
    d = make_daemon(
        extra="[events]\nenabled = true\n"
        'endpoint = "tcp://127.0.0.1:*"\nreplay_endpoint = "tcp://127.0.0.1:*"\nbatch_ms = 5\n'
        '[s3]\nlisten = "127.0.0.1:0"\n'
    )
    acme = kvtier.Client(d.unix_url, "acme-token")
    s3 = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{d.s3_port}",
        aws_access_key_id="AKIDACME",
        aws_secret_access_key="acme-s3-secret",
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 0}),
    )
    router = Router(d.ports["events_endpoint"], d.ports["events_replay_endpoint"])
    try:
        router.wait_for_probe(lambda k: acme.put(k, bytes(4096)))
        probes = {key(i, b"p") for i in range(1000)}

        def objects() -> list[Any]:
            """The acme blocks stored in G2 that are not probes (nor markers): S3 objects."""
            held = stored(events_of(router.live, "kvtier.acme"), "CPU")
            return [h for h in held if h not in probes and not h.startswith(b"marker")]

        body = os.urandom(100_000)
        s3.create_bucket(Bucket="kvcache")
        s3.put_object(Bucket="kvcache", Key="layer-0/block-1", Body=body)
        router.receive(lambda: len(objects()) == 1)
        (obj,) = objects()
        assert obj not in removed(events_of(router.live, "kvtier.acme"), "CPU")

        # Put again with the same bytes; a marker block after it tells when everything the
        # daemon had to say about that put has arrived.
        s3.put_object(Bucket="kvcache", Key="layer-0/block-1", Body=body)
        acme.put(b"marker".ljust(32, b"m"), bytes(4096))
        router.receive(
            lambda: (
                b"marker".ljust(32, b"m") in stored(events_of(router.live, "kvtier.acme"), "CPU")
            )
        )
        announced = [
            e
            for e in events_of(router.live, "kvtier.acme")
            if isinstance(e, BlockStored) and obj in e.block_hashes
        ]
        assert len(announced) == 1, "the same bytes stored again announce nothing"
        assert s3.get_object(Bucket="kvcache", Key="layer-0/block-1")["Body"].read() == body

        s3.delete_object(Bucket="kvcache", Key="layer-0/block-1")
        router.receive(lambda: obj in removed(events_of(router.live, "kvtier.acme"), "CPU"))
    finally:
        router.close()
        acme.close()
