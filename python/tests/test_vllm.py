"""kvtier.vllm.KvtierTier, the real vllm package's classes (0.33.0 from PyPI), a real kvtierd.

vLLM's own OffloadingSpecFactory builds the TieringOffloadingSpec from the configuration a user
passes in kv_connector_extra_config, and its TieringOffloadingManager drives the tier, with the
primary CPU tier in vLLM's shared-memory region. vLLM's engine and GPU workers need a GPU: the
GPU-to-CPU copies a worker makes are done here by writing and reading the primary tier's view.
"""

from __future__ import annotations

import hashlib
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from conftest import DEADLINE, Daemon
from vllm.v1.kv_hints import KvHintAction, KvHintsEnvelope
from vllm.v1.kv_offload.base import (
    LookupResult,
    Medium,
    ReqContext,
    ScheduleEndContext,
    make_offload_key,
)
from vllm.v1.kv_offload.config import (
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.factory import OffloadingSpecFactory
from vllm.v1.kv_offload.tiering.base import TransferJob

import kvtier
from kvtier.vllm import KV_HINT_ACTION, KvtierTier

CHUNK = 4096  # Bytes of one block in the primary tier.
PRIMARY = 4  # Chunks the primary tier holds.
FULL = (OffloadingGroupConfig(tokens_per_block=16, layer_names=("l0",), group_id=0),)
# A hybrid model's groups, as vLLM's build_offloading_config makes them: full attention, a
# sliding window of two chunks, and a Mamba state (a window of one chunk).
HYBRID = (
    OffloadingGroupConfig(tokens_per_block=16, layer_names=("attn0",), group_id=0),
    OffloadingGroupConfig(
        tokens_per_block=16, layer_names=("swa0",), group_id=1, sliding_window_size_in_chunks=2
    ),
    OffloadingGroupConfig(
        tokens_per_block=16, layer_names=("mamba0",), group_id=2, sliding_window_size_in_chunks=1
    ),
)


class Engine:
    """The scheduler side of one vLLM engine's OffloadingConnector with kvtier as its tier."""

    def __init__(
        self, url: str, token: str | None = None, model: str = "llama-3-8b",
        groups: tuple[OffloadingGroupConfig, ...] = FULL, primary: int = PRIMARY,
        tier: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """kvtier.vllm's tier on kvtierd at `url`, or the secondary tier `tier` configures."""
        if tier is None:
            tier = {
                "type": "KvtierTier", "module_path": "kvtier.vllm", "url": url, "timeout": 0.5,
                "enable_kv_events": True,
            }  # fmt: skip
            if token:
                tier["token"] = token
        config = OffloadingConfig(
            groups=groups,
            worker_kv_bytes_per_block=CHUNK,
            enable_kv_cache_events=True,
            extra_config={
                "spec_name": "TieringOffloadingSpec",
                "cpu_bytes_to_use": primary * CHUNK,
                "eviction_policy": "lru",
                "secondary_tiers": [tier],
            },
            engine_id=f"kvtier-test-{uuid.uuid4().hex[:12]}",
            model=OffloadingModelConfig(name=model, dtype="bfloat16", max_model_len=4096),
            cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
            parallel=OffloadingParallelConfig(
                rank=0,
                world_size=1,
                tp_size=1,
                pp_size=1,
                pcp_size=1,
                dcp_size=1,
                data_parallel_index=0,
                data_parallel_size=1,
                data_parallel_rank_local=None,
                is_parallelism_agnostic=True,
            ),
        )
        self.spec = OffloadingSpecFactory.create_spec(config)
        self.mgr = self.spec.get_manager()
        self.tier: Any = self.mgr.secondary_tiers[0]
        self.view: memoryview | None = self.mgr.primary_tier.get_kv_memoryview().cast("B")
        self.bs = CHUNK

    def step(self, new: tuple[str, ...] = ()) -> None:
        with self.mgr.lock:
            self.mgr.on_schedule_end(
                ScheduleEndContext(new_req_ids=list(new), preempted_req_ids=())
            )

    def settle(self) -> None:
        """Lets the tier's jobs finish and the manager collect them (once per step)."""
        self.tier.drain_jobs()
        self.step()
        self.step()

    def store(self, req: str, blocks: list[int], **ctx: Any) -> list[bytes]:
        """Prefills `blocks` (the worker's copy into the primary tier done here) and lets the
        tier take them; `ctx`: the request's ReqContext fields (kv_transfer_params, ...)."""
        keys = [key(b) for b in blocks]
        self.store_keys(req, keys, lambda k: content(blocks[keys.index(k)]), **ctx)
        return keys

    def store_keys(
        self,
        req: str,
        keys: list[bytes],
        fill: Callable[[bytes], bytes] = lambda k: content(k),
        **fields: Any,
    ) -> None:
        """The same for any offload keys: each chunk holds fill(its key)."""
        ctx = ReqContext(req_id=req, **fields)
        with self.mgr.lock:
            self.mgr.on_new_request(ctx)
            out = self.mgr.prepare_store(keys, ctx)
            assert out is not None, "the primary tier is full"
            for k, c in zip(out.keys_to_store, out.store_spec.chunk_ids, strict=True):
                self.chunk(int(c))[:] = fill(k)
            self.mgr.complete_store(out.keys_to_store, ctx, success=True)
            self.mgr.on_request_finished(ctx)
        self.settle()

    def lookup(self, keys: list[bytes], ctx: ReqContext) -> list[LookupResult]:
        """Looks the keys up until no answer is RETRY (vLLM retries at the next step)."""
        deadline = time.monotonic() + DEADLINE
        while True:
            with self.mgr.lock:
                results = [self.mgr.lookup(k, ctx) for k in keys]
            if LookupResult.RETRY not in results:
                return results
            assert time.monotonic() < deadline, "lookups stayed RETRY"
            self.step()
            self.tier.drain_jobs()

    def promote(self, keys: list[bytes], ctx: ReqContext) -> None:
        """Runs steps until the promotion from kvtierd has landed every key in the primary tier."""
        deadline = time.monotonic() + DEADLINE
        self.step((ctx.req_id,))  # Submits the load jobs.
        while self.lookup(keys, ctx) != [LookupResult.HIT] * len(keys):
            assert time.monotonic() < deadline, "the promotion never completed"
            self.settle()

    def chunk(self, c: int) -> memoryview:
        assert self.view is not None
        return self.view[c * self.bs : (c + 1) * self.bs]

    def close(self) -> None:
        if self.view is not None:
            self.view.release()
            self.view = None
            self.mgr.shutdown()


def key(block: int, group: int = 0) -> bytes:
    """The offload key of a block whose hash is, as vLLM's are, a SHA-256."""
    return make_offload_key(hashlib.sha256(f"block-{block}".encode()).digest(), group)


def content(block: int | bytes) -> bytes:
    seed = block if isinstance(block, int) else int.from_bytes(hashlib.sha256(block).digest()[:8])
    return np.random.default_rng(seed).integers(0, 256, CHUNK, dtype=np.uint8).tobytes()


def settled_lookup(tier: KvtierTier, k: bytes, ctx: ReqContext) -> LookupResult:
    """The tier's answer once it is no longer RETRY, flushing its lookups as vLLM does per step."""
    deadline = time.monotonic() + DEADLINE
    while (r := tier.lookup(k, ctx)) is LookupResult.RETRY:
        assert time.monotonic() < deadline, "the lookup never settled"
        tier.on_schedule_end(ScheduleEndContext(new_req_ids=[], preempted_req_ids=()))
    return r


def finished(tier: KvtierTier, n: int) -> list[Any]:
    deadline = time.monotonic() + DEADLINE
    out: list[Any] = []
    while len(out) < n:
        assert time.monotonic() < deadline, "tier jobs never finished"
        tier.drain_jobs()
        out += list(tier.get_finished_jobs())
    return out


@pytest.fixture
def engines() -> Iterator[Callable[..., Engine]]:
    made: list[Engine] = []

    def make(*args: Any, **kwargs: Any) -> Engine:
        made.append(Engine(*args, **kwargs))
        return made[-1]

    yield make
    for e in made:
        e.close()


def test_blocks_cascade_to_kvtierd_and_come_back_byte_exact(
    daemon: Daemon, engines: Callable[..., Engine]
) -> None:
    e = engines(daemon.unix_url, "acme-token")
    a = e.store("A", [1, 2, 3])
    stored = [ev for ev in e.mgr.take_events() if ev.medium is Medium.STORAGE and not ev.removed]
    assert [k for ev in stored for k in ev.keys] == a
    assert kvtier.Client(daemon.unix_url, "acme-token").stats()["blocks"] == 3
    assert evicted_and_loaded_back(e, a) == [content(1), content(2)]


def evicted_and_loaded_back(e: Engine, a: list[bytes]) -> list[bytes]:
    """Fills the primary tier with other blocks so that A's three leave it, then loads the first
    two back from the secondary tier as a request would; their bytes."""
    e.store("B", [10, 11, 12, 13])
    ctx = ReqContext(req_id="C")
    with e.mgr.lock:
        e.mgr.on_new_request(ctx)
        assert [e.mgr.primary_tier.lookup(k, ctx) for k in a] == [LookupResult.MISS] * 3
    assert e.lookup(a[:2], ctx) == [LookupResult.HIT_PENDING] * 2  # Promotion from the tier.
    e.promote(a[:2], ctx)
    with e.mgr.lock:
        load = e.mgr.prepare_load(a[:2], ctx)
        got = [bytes(e.chunk(int(c))) for c in load.chunk_ids]
        e.mgr.complete_load(a[:2], ctx)
        e.mgr.on_request_finished(ctx)
    return got


def test_a_requests_kvtier_hint_puts_its_blocks_in_the_session_and_reaches_kvtierd(
    daemon: Daemon, engines: Callable[..., Engine]
) -> None:
    e = engines(daemon.unix_url, "acme-token")
    c = kvtier.Client(daemon.unix_url, "acme-token")
    hint = {"session": "conversation-1", "retain_s": 30, "priority": "high"}
    e.store("A", [1, 2, 3], kv_transfer_params={"kvtier": hint})
    assert c.stats()["session_hints"] == 1
    # The same through vLLM's kv_hints envelope, on the session's last request.
    envelope = KvHintsEnvelope(
        protocol_version="1", message_id="m1",
        actions=[KvHintAction(
            action_id="a1", action_type=KV_HINT_ACTION, action_version="1",
            payload={"session": "conversation-1", "finished": True},
        )],
    )  # fmt: skip
    e.store("B", [4, 5], kv_hints=envelope)
    assert c.stats()["session_hints"] == 2
    # A malformed hint is ignored: the request's blocks are stored all the same, in no session.
    e.store("C", [6], kv_transfer_params={"kvtier": {"session": "x", "priority": "urgent"}})
    assert c.stats()["session_hints"] == 2
    assert c.get(e.tier._key(key(6))) == content(6)
    # Every block of the session's two requests, and only those, went with it.
    assert c.delete_session(kvtier.session_id("conversation-1")).memory_blocks == 5
    assert c.stats()["blocks"] == 1


def test_another_engine_reads_them_after_this_one_is_gone_and_nobody_else_does(
    daemon: Daemon, engines: Callable[..., Engine]
) -> None:
    first = engines(daemon.unix_url, "acme-token")
    a = first.store("A", [1, 2])
    first.close()
    second = engines(daemon.unix_url, "acme-token")  # The engine restarted: same model.
    ctx = ReqContext(req_id="R")
    with second.mgr.lock:
        second.mgr.on_new_request(ctx)
    assert second.lookup(a, ctx) == [LookupResult.HIT_PENDING] * 2
    second.promote(a, ctx)
    with second.mgr.lock:
        load = second.mgr.prepare_load(a, ctx)
        assert [bytes(second.chunk(int(c))) for c in load.chunk_ids] == [content(1), content(2)]
        second.mgr.complete_load(a, ctx)
    for other in (
        engines(daemon.unix_url, "other-token"),  # Another tenant.
        engines(daemon.unix_url, "acme-token", model="llama-3-70b"),  # Another model.
    ):
        with other.mgr.lock:
            other.mgr.on_new_request(ctx)
        assert other.lookup(a, ctx) == [LookupResult.MISS] * 2


def test_a_lookup_while_the_store_is_in_flight_waits_and_never_hits_early(
    daemon: Daemon, engines: Callable[..., Engine]
) -> None:
    e = engines(daemon.unix_url)
    keys = [key(7)]
    e.chunk(0)[:] = content(7)
    daemon.pause()  # The store cannot complete while kvtierd is stopped.
    e.tier.submit_store(TransferJob(1, keys, np.array([0]), False, ReqContext(req_id="S")))
    ctx = ReqContext(req_id="L")
    assert e.tier.lookup(keys[0], ctx) == LookupResult.RETRY
    e.tier.on_schedule_end(ScheduleEndContext(new_req_ids=[], preempted_req_ids=()))
    assert e.tier.lookup(keys[0], ctx) in (LookupResult.RETRY, LookupResult.MISS)
    daemon.resume()
    [job] = finished(e.tier, 1)
    assert job.job_id == 1 and job.success
    # That lookup may have been answered before the store landed (a miss: recomputed, never
    # wrong KV); vLLM keeps a request's answer until the request ends. A new request hits.
    assert settled_lookup(e.tier, keys[0], ctx) in (LookupResult.HIT, LookupResult.MISS)
    e.tier.on_request_finished(ctx)
    assert settled_lookup(e.tier, keys[0], ReqContext(req_id="L2")) is LookupResult.HIT


def test_kvtierd_killed_mid_job_fails_every_key_of_it_not_a_hang(
    make_daemon: Callable[..., Daemon], engines: Callable[..., Engine]
) -> None:
    d = make_daemon()
    e = engines(d.unix_url)
    keys = [key(1), key(2)]
    for c, b in enumerate((1, 2)):
        e.chunk(c)[:] = content(b)
    e.tier.submit_store(TransferJob(1, keys, np.array([0, 1]), False, ReqContext(req_id="S")))
    assert finished(e.tier, 1)[0].success
    d.pause()  # The jobs are sent and wait for kvtierd...
    start = time.monotonic()
    e.chunk(2)[:] = bytes(CHUNK)
    e.tier.submit_load(TransferJob(2, keys, np.array([2, 3]), True, ReqContext(req_id="L")))
    e.tier.submit_store(TransferJob(3, [key(3)], np.array([1]), False, ReqContext(req_id="S")))
    d.stop(signal.SIGKILL)  # ...which dies in the middle of them.
    results = {j.job_id: j for j in finished(e.tier, 2)}
    assert not results[2].success and tuple(results[2].successful_keys) == ()
    assert not results[3].success
    assert time.monotonic() - start < 30  # Each call gave up after its 0.5 s timeout.
    d.start()  # Back: the same tier serves again (the blocks went with kvtierd's memory).
    e.tier.submit_store(TransferJob(4, keys, np.array([0, 1]), False, ReqContext(req_id="S")))
    assert finished(e.tier, 1)[0].success
    e.tier.submit_load(TransferJob(5, keys, np.array([2, 3]), True, ReqContext(req_id="L")))
    assert finished(e.tier, 1)[0].success
    assert [bytes(e.chunk(2)), bytes(e.chunk(3))] == [content(1), content(2)]


def test_kvtierds_events_name_the_blocks_as_vllm_does(
    make_daemon: Callable[..., Daemon], engines: Callable[..., Engine]
) -> None:
    from test_kv_events import TENANTS, Router, events_of, stored, wait_for_messages
    from vllm.v1.core.kv_cache_utils import BlockHash, maybe_convert_block_hash
    from vllm.v1.kv_offload.base import get_offload_block_hash

    d = make_daemon(
        extra='[events]\nenabled = true\nendpoint = "tcp://127.0.0.1:*"\n'
        'replay_endpoint = "tcp://127.0.0.1:*"\nbatch_ms = 5\n'
    )
    e = engines(d.unix_url, "acme-token")
    a = e.store("A", [1, 2, 3])
    wait_for_messages(d, TENANTS + 1)  # The start-up announcement's, then the store's.
    router = Router(d.ports["events_endpoint"], d.ports["events_replay_endpoint"])
    try:
        names = stored(events_of(router.replay(0), "kvtier.acme"), "CPU")
    finally:
        router.close()
    vllms = [maybe_convert_block_hash(BlockHash(get_offload_block_hash(k))) for k in a]
    assert list(names) == vllms  # The same names vLLM's own KV events give these blocks.
    assert names[vllms[1]] == vllms[0] and names[vllms[2]] == vllms[1]


def test_a_hybrid_models_groups_reach_kvtierd_and_come_back_with_their_state(
    daemon: Daemon, engines: Callable[..., Engine]
) -> None:
    e = engines(daemon.unix_url, groups=HYBRID, primary=8)
    blocks = [1, 2, 3, 4]
    # What vLLM keeps of a request of four blocks: every full-attention chunk, the last two of
    # the sliding window, the last Mamba state.
    full = [key(b, 0) for b in blocks]
    swa = [key(b, 1) for b in blocks[-2:]]
    mamba = [key(blocks[-1], 2)]
    e.store_keys("A", full + swa + mamba)
    # In kvtierd: the windowed groups' chunks are state values of the full-attention chunks,
    # and kvtier's own resume lookup agrees with vLLM's groups.
    c = kvtier.Client(daemon.unix_url)
    groups = [kvtier.StateGroup("vllm-group1", 2), kvtier.StateGroup("vllm-group2", 1)]
    m = c.lookup_resume(e.tier._keys(full), groups, all_lengths=True)
    assert (m.kv_blocks, m.resume_blocks, m.resumable) == (4, 4, [4])
    assert e.tier._keys(mamba) == [kvtier.state_key(e.tier._keys(full)[-1], "vllm-group2")]
    e.store_keys("B", [key(b) for b in range(10, 18)])  # A leaves the primary tier.
    ctx = ReqContext(req_id="C")
    with e.mgr.lock:
        e.mgr.on_new_request(ctx)
    every = full + swa + mamba
    assert e.lookup(every, ctx) == [LookupResult.HIT_PENDING] * len(every)
    e.promote(every, ctx)
    with e.mgr.lock:
        load = e.mgr.prepare_load(every, ctx)
        got = [bytes(e.chunk(int(ch))) for ch in load.chunk_ids]
        e.mgr.complete_load(every, ctx)
        e.mgr.on_request_finished(ctx)
    assert got == [content(k) for k in every]
    # A lost state: vLLM's own lookup of the Mamba group misses, so it never resumes without it.
    assert c.delete(e.tier._keys(mamba)[0])
    assert c.lookup_resume(e.tier._keys(full), groups).resume_blocks == 0
    with e.mgr.lock:
        e.mgr.on_new_request(ReqContext(req_id="D"))
    assert settled_lookup(e.tier, mamba[0], ReqContext(req_id="D")) is LookupResult.MISS
    assert settled_lookup(e.tier, full[-1], ReqContext(req_id="D")) is LookupResult.HIT
