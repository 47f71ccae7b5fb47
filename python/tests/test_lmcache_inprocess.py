"""LMCache in-process mode on kvtierd: a real LMCacheEngine (lmcache 0.5.6) on this CPU, with
kvtier.lmcache.remote loaded through `remote_storage_plugins` as its only store (local_cpu off,
so LMCache's CPU backend is an allocator only). vLLM's GPU connector needs CUDA; the engine is
given a CPU connector with the same contract (KV in [2, layers, tokens, hidden] chunks)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch

os.environ.setdefault("LMCACHE_DISABLE_BANNER", "1")
os.environ["LMCACHE_TRACK_USAGE"] = "false"

from conftest import DEADLINE, Daemon
from lmcache.utils import mock_up_broadcast_fn, mock_up_broadcast_object_fn
from lmcache.v1.cache_engine import LMCacheEngineBuilder
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.gpu_connector.gpu_connectors import GPUConnectorInterface
from lmcache.v1.metadata import LMCacheMetadata

import kvtier
from kvtier.lmcache.remote import client_for

LAYERS, CHUNK, KV_HEADS, HEAD_SIZE = 4, 16, 2, 8
HIDDEN = KV_HEADS * HEAD_SIZE
SLOTS = 256


class CpuKVConnector(GPUConnectorInterface):  # type: ignore[misc]
    """Moves chunks between LMCache's MemoryObjs and a paged KV cache in host memory:
    kvcaches[layer] is [2, slots, hidden]; slot_mapping gives each token's slot."""

    def get_shape(self, num_tokens: int) -> torch.Size:
        return torch.Size([2, LAYERS, num_tokens, HIDDEN])

    def from_gpu(self, memory_obj: Any, start: int, end: int, **kw: Any) -> None:
        slots = kw["slot_mapping"][start:end]
        for layer, kv in enumerate(kw["kvcaches"]):
            memory_obj.tensor[:, layer] = kv[:, slots]

    def to_gpu(self, memory_obj: Any, start: int, end: int, **kw: Any) -> None:
        slots = kw["slot_mapping"][start:end]
        for layer, kv in enumerate(kw["kvcaches"]):
            kv[:, slots] = memory_obj.tensor[:, layer]

    def batched_from_gpu(self, memory_objs: Any, starts: Any, ends: Any, **kw: Any) -> None:
        for m, s, e in zip(memory_objs, starts, ends, strict=True):
            self.from_gpu(m, s, e, **kw)

    def batched_to_gpu(
        self, memory_objs: Any = None, starts: Any = None, ends: Any = None, **kw: Any
    ) -> None:
        for m, s, e in zip(memory_objs, starts, ends, strict=True):
            self.to_gpu(m, s, e, **kw)


def engine(name: str, url: str) -> Any:
    config = LMCacheEngineConfig.from_defaults(
        chunk_size=CHUNK,
        local_cpu=False,
        max_local_cpu_size=0.02,
        save_unfull_chunk=True,
        remote_serde="naive",
        remote_storage_plugins=["kvtier"],
        extra_config={
            "remote_storage_plugin.kvtier.module_path": "kvtier.lmcache.remote",
            "remote_storage_plugin.kvtier.class_name": "KvtierConnectorAdapter",
            "remote_storage_plugin.kvtier.url": url,
        },
        lmcache_instance_id=name,
    )
    metadata = LMCacheMetadata(
        model_name="toy-model",
        world_size=1,
        local_world_size=1,
        worker_id=0,
        local_worker_id=0,
        kv_dtype=torch.bfloat16,
        kv_shape=(LAYERS, 2, CHUNK, KV_HEADS, HEAD_SIZE),
        chunk_size=CHUNK,
    )
    e = LMCacheEngineBuilder.get_or_create(
        name, config, metadata, CpuKVConnector(), mock_up_broadcast_fn, mock_up_broadcast_object_fn
    )
    e.post_init()
    assert any("kvtier" in b for b in e.storage_manager.storage_backends), "plugin not loaded"
    return e


@pytest.fixture
def engines() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        LMCacheEngineBuilder.destroy(name)


def test_a_new_engine_retrieves_what_another_stored_and_tenants_stay_apart(
    daemon: Daemon, engines: list[str]
) -> None:
    url = f"kvtier+unix://{daemon.socket_path}?token=acme-token"
    tokens = torch.arange(40)  # Two full chunks and a partial one of 8 tokens.
    slots = torch.randperm(SLOTS)[:40]
    kv = [torch.randn(2, SLOTS, HIDDEN).to(torch.bfloat16) for _ in range(LAYERS)]

    engines.append("writer")
    engine("writer", url).store(tokens, kvcaches=kv, slot_mapping=slots)
    acme = kvtier.Client(daemon.unix_url, "acme-token")
    deadline = time.monotonic() + DEADLINE
    while acme.stats()["blocks"] < 3:  # LMCache stores in the background.
        assert time.monotonic() < deadline, "the chunks never reached kvtierd"
        time.sleep(0.02)  # Polling, bounded.

    engines.append("reader")
    reader = engine("reader", url)
    assert reader.lookup(tokens) == 40
    out = [torch.zeros(2, SLOTS, HIDDEN, dtype=torch.bfloat16) for _ in range(LAYERS)]
    mask = reader.retrieve(tokens, kvcaches=out, slot_mapping=slots)
    assert int(mask.sum()) == 40
    for layer in range(LAYERS):
        assert torch.equal(out[layer][:, slots], kv[layer][:, slots])

    engines.append("other")
    other = engine("other", f"kvtier://127.0.0.1:{daemon.ports['native_port']}?token=other-token")
    assert other.lookup(tokens) == 0


def test_a_requests_kvtier_configs_put_its_chunks_in_the_session_and_hint_it(
    daemon: Daemon, engines: list[str]
) -> None:
    url = f"kvtier+unix://{daemon.socket_path}?token=acme-token"
    tokens = torch.arange(32)  # Two full chunks.
    slots = torch.randperm(SLOTS)[:32]
    kv = [torch.randn(2, SLOTS, HIDDEN).to(torch.bfloat16) for _ in range(LAYERS)]
    engines.append("hinted")
    configs = {
        "lmcache.kvtier.session": "agent-7",
        "lmcache.kvtier.retain_s": 20,
        "lmcache.kvtier.priority": "high",
    }
    engine("hinted", url).store(tokens, kvcaches=kv, slot_mapping=slots, request_configs=configs)
    acme = kvtier.Client(daemon.unix_url, "acme-token")
    deadline = time.monotonic() + DEADLINE
    # LMCache stores in the background; the hint follows the chunks.
    while (stats := acme.stats())["blocks"] < 2 or stats["session_hints"] < 1:
        assert time.monotonic() < deadline, "the chunks or their hint never reached kvtierd"
        time.sleep(0.02)  # Polling, bounded.
    assert acme.delete_session(kvtier.session_id("agent-7")).memory_blocks == 2


def test_bad_urls_are_clear_errors(daemon: Daemon) -> None:
    with pytest.raises(kvtier.InvalidArgument, match="unknown URL"):
        client_for("redis://127.0.0.1:6379")
    with pytest.raises(kvtier.InvalidArgument, match="unknown parameter"):
        client_for(f"kvtier+unix://{daemon.socket_path}?tokn=x")
    with pytest.raises(kvtier.Unauthenticated):
        client_for(f"kvtier+unix://{daemon.socket_path}?token=wrong")
    with client_for(f"kvtier+unix://{daemon.socket_path}?tenant=acme&token=acme-token") as c:
        assert c.server_info.tenant == "acme"
