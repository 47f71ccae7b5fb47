"""vLLM on kvtier: a secondary tier of vLLM's native OffloadingConnector (tested with vllm
0.33.0).

vLLM's ``TieringOffloadingSpec`` keeps a primary tier in CPU memory and cascades blocks to
secondary tiers; this one keeps them in kvtierd, so that they outlive the engine, are shared by
every engine on the node (and, through G4, the cluster), and come back at the speed of the link.
No patch to vLLM::

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "OffloadingConnector",
      "kv_role": "kv_both", "kv_connector_extra_config": {
        "spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 8000000000,
        "secondary_tiers": [{"type": "KvtierTier", "module_path": "kvtier.vllm",
          "url": "unix:///var/lib/kvtier/kvtierd.sock", "token": "TOKEN"}]}}'

Entry keys besides ``type`` and ``module_path``: ``url`` (required), ``token``, ``tenant``,
``connections`` (4), ``timeout`` (seconds a call waits for a kvtierd that is down, stopped or
hung, default 2: its blocks then count as misses or failed keys, and vLLM recomputes them),
``enable_kv_events`` (report stored blocks to vLLM's KV events, medium ``STORAGE``).

Each primary-tier chunk is one kvtier block, moved straight between the primary tier's shared
memory and kvtierd (no intermediate copy), keyed by vLLM's offload key (block hash and KV-cache
group) in a namespace of the model, its dtype, the block geometry and the parallel layout, and
the tenant; each put carries vLLM's own block hash, which names the block in kvtierd's KV events
(``[events]``) as vLLM's events do. Lookups are batched per step (vLLM's
``AsyncLookupManager``): one existence query per request, answered key by key.

Hybrid models (``docs/state.md``): vLLM offloads every KV-cache group it has, full attention,
sliding window (``sliding_window_size_in_chunks``), chunked local attention and Mamba (a window
of one chunk), and asks for each group's chunks itself, so each group's chunks reach kvtierd and
come back. The chunks of a windowed group are kvtier state values of the full-attention chunk of
the same block hash (:func:`kvtier.state_key` of it, group ``vllm-group<id>``; role
``STATE``), and the full-attention chunks are KV that needs state (``KV_NEEDS_STATE``): kvtierd
evicts KV whose state is gone first, and :meth:`kvtier.Client.lookup_resume` answers for them.
A model without a full-attention group keys every chunk by its offload key.

Session hints (``docs/store.md``): a request whose ``kv_transfer_params`` (a field of the
OpenAI-compatible API's requests) hold ``{"kvtier": {"session": ..., "retain_s": ...,
"priority": ..., "finished": ...}}``, or whose ``kv_hints`` envelope has an action of type
``kvtier.session`` with that object as payload, has its chunks put with that session, and the
hint reaches kvtierd once they are stored, when vLLM finishes the request. vLLM 0.33 passes a
secondary tier no request priority (its ``ReqContext`` holds ``req_id``,
``kv_transfer_params``, ``kv_hints`` and ``load_tier_filter``): a priority travels in the hint.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, ClassVar

from vllm.v1.core.kv_cache_utils import BlockHash, maybe_convert_block_hash
from vllm.v1.kv_offload.base import (
    Locality,
    LookupResult,
    Medium,
    OffloadingEvent,
    OffloadKey,
    ReqContext,
    RequestOffloadingContext,
    ScheduleEndContext,
    get_offload_block_hash,
    get_offload_group_idx,
    make_offload_key,
)
from vllm.v1.kv_offload.tiering.async_lookup import AsyncLookupManager
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager, TransferJob

from . import _kvtier
from ._client import Client
from ._errors import Error
from ._hints import KV_HINT_ACTION, SessionHint, from_vllm, log
from ._types import Role


def namespace_model(spec: Any, block_bytes: int) -> str:
    """What must be equal for two engines' chunks to be interchangeable, as one string: the
    model, KV dtype and layout, token geometry, layer groups, parallel layout and chunk size."""
    c = spec.config
    p = c.parallel
    groups = ";".join(f"{g.tokens_per_block}:{','.join(g.layer_names)}" for g in c.groups)
    layout = f"{c.kv_cache_layout}|{c.canonical_layout}|{c.replicated_layout}"
    shard = f"tp{p.tp_size}pp{p.pp_size}pcp{p.pcp_size}dcp{p.dcp_size}r{p.rank}"
    digest = hashlib.sha256(f"{groups}|{layout}".encode()).hexdigest()[:16]
    return "|".join(
        [c.model.name, "vllm", str(c.model.dtype), f"tph{c.cache.tokens_per_hash}", shard,
         digest, f"{block_bytes}B"]
    )  # fmt: skip


def state_group(group_id: int) -> str:
    """The kvtier state group of a windowed vLLM KV-cache group."""
    return f"vllm-group{group_id}"


class _Lookups(AsyncLookupManager):
    """One existence query in kvtierd per request and step, off the scheduler thread. Key by
    key: vLLM scans a full-attention group from its start and a windowed one from its end."""

    def __init__(self, tier: KvtierTier) -> None:
        super().__init__(tier_type=tier.tier_type)
        self._tier = tier

    def batch_lookup(self, keys: list[OffloadKey], req_context: ReqContext) -> Iterable[bool]:
        try:
            tiers = self._tier._client.exists_many(self._tier._keys(keys))
        except Error:
            return [False] * len(keys)
        return [t is not None for t in tiers]


class KvtierTier(SecondaryTierManager):
    """A ``TieringOffloadingSpec`` secondary tier in kvtierd (see the module's documentation)."""

    medium: ClassVar[Medium] = Medium.STORAGE

    def __init__(
        self,
        offloading_spec: Any,
        primary_kv_view: memoryview,
        tier_type: str,
        backpressure_detector: Any = None,
        *,
        url: str | None = None,
        token: str | None = None,
        tenant: str | None = None,
        connections: int = 4,
        timeout: float = 2.0,
        enable_kv_events: bool = False,
        locality: str | None = "REMOTE",
    ) -> None:
        super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector)
        if not url:
            raise ValueError("kvtier secondary tier: its entry needs a 'url' of kvtierd")
        self._client = Client(
            url, token, tenant=tenant, connections=connections, retry_timeout=timeout,
            io_timeout=timeout,
        )  # fmt: skip
        bs = self.block_size_bytes
        self._namespace = _kvtier.Namespace(
            self._client.server_info.tenant, namespace_model(offloading_spec, bs),
            num_layers=1, num_kv_heads=1, head_dim=1, tokens_per_block=1,
        )  # fmt: skip
        groups = offloading_spec.config.groups
        self._windowed = {g.group_id for g in groups if g.sliding_window_size_in_chunks is not None}
        # The group whose chunks the windowed groups' chunks hang off: the first full one.
        self._anchor = next(
            (g.group_id for g in groups if g.sliding_window_size_in_chunks is None), None
        )
        self._flat = primary_kv_view.cast("B")
        self.locality = Locality(locality) if locality else None
        kv_events = getattr(offloading_spec, "kv_events_config", None)
        self._events: list[OffloadingEvent] | None = (
            [] if enable_kv_events and getattr(kv_events, "enable_kv_cache_events", False) else None
        )
        # Finished jobs, with the keys stored ("store") or the keys that failed to load ("load").
        self._finished: queue.SimpleQueue[tuple[JobResult, str, list[OffloadKey]]] = (
            queue.SimpleQueue()
        )
        self._pool = ThreadPoolExecutor(max(1, connections), thread_name_prefix="kvtier_vllm")
        self._jobs: set[Future[None]] = set()
        self._jobs_mu = threading.Lock()
        # Store jobs of each request that carries a session, for its hint to follow them.
        self._session_stores: dict[str, list[Future[None]]] = {}
        self._lookups = _Lookups(self)

    def _anchor_key(self, key: OffloadKey) -> bytes | None:
        """The full-attention chunk a windowed group's chunk belongs to; None for a chunk of
        a full-attention group (or of a model without one)."""
        if self._anchor is None or get_offload_group_idx(key) not in self._windowed:
            return None
        anchor = make_offload_key(get_offload_block_hash(key), self._anchor)
        return _kvtier.opaque_key(self._namespace, bytes(anchor))

    def _key(self, key: OffloadKey) -> bytes:
        anchor = self._anchor_key(key)
        if anchor is None:
            return _kvtier.opaque_key(self._namespace, bytes(key))
        return _kvtier.state_key(anchor, state_group(get_offload_group_idx(key)))

    def _keys(self, keys: Iterable[OffloadKey]) -> list[bytes]:
        return [self._key(k) for k in keys]

    def _writes(self, keys: list[OffloadKey]) -> tuple[list[bytes], list[bytes | None], list[int]]:
        """Keys, parents and roles of a store: each group's chunks chained in order, a windowed
        group's chunk a state value of its full-attention chunk."""
        kv_keys = self._keys(keys)
        parents: list[bytes | None] = []
        roles: list[int] = []
        previous: dict[int, bytes] = {}
        hybrid = bool(self._windowed) and self._anchor is not None
        for k, kv in zip(keys, kv_keys, strict=True):
            anchor = self._anchor_key(k)
            if anchor is not None:
                parents.append(anchor)
                roles.append(Role.STATE)
                continue
            group = get_offload_group_idx(k)
            parents.append(previous.get(group))
            previous[group] = kv
            roles.append(Role.KV_NEEDS_STATE if hybrid else Role.KV)
        return kv_keys, parents, roles

    def _chunks(self, chunk_ids: Any) -> list[memoryview]:
        bs = self.block_size_bytes
        return [self._flat[int(c) * bs : (int(c) + 1) * bs] for c in chunk_ids]

    def _submit(self, work: Any, req_id: str | None = None) -> None:
        f = self._pool.submit(work)
        with self._jobs_mu:
            self._jobs.add(f)
            if req_id is not None:
                self._session_stores.setdefault(req_id, []).append(f)
        f.add_done_callback(self._done)

    def _done(self, f: Future[None]) -> None:
        with self._jobs_mu:
            self._jobs.discard(f)

    # -- SecondaryTierManager ------------------------------------------------------------------

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        found = self._lookups.lookup(key, req_context)
        if found is None:
            return LookupResult.RETRY
        return LookupResult.HIT if found else LookupResult.MISS

    def submit_store(self, job_metadata: TransferJob) -> None:
        """Copies the job's chunks from the primary tier into kvtierd, chained in order."""
        job = job_metadata
        keys = list(job.keys)
        chunks = self._chunks(job.chunk_ids)
        hint = job.req_context.get_state(SessionHint)
        session = hint.session if hint is not None else 0

        def store() -> None:
            start = time.perf_counter()
            kv_keys, parents, roles = self._writes(keys)
            try:
                # vLLM's own names of the blocks, as its KV events give them: kvtierd's events
                # then match the engine's. A state value is no block of vLLM's: it goes unnamed.
                names = [
                    None
                    if role == Role.STATE
                    else maybe_convert_block_hash(BlockHash(get_offload_block_hash(k)))
                    for k, role in zip(keys, roles, strict=True)
                ]
                results: list[Any] = self._client._impl.put_many(
                    kv_keys, chunks, parents, session, 0, names, roles
                )
                ok = [not isinstance(r, Error) for r in results]
            except Error:
                ok = [False] * len(keys)
            stored = [k for k, good in zip(keys, ok, strict=True) if good]
            result = JobResult(
                job.job_id, all(ok), transfer_time=time.perf_counter() - start,
                transfer_bytes=len(stored) * self.block_size_bytes,
            )  # fmt: skip
            self._finished.put((result, "store", stored))

        self._submit(store, job.req_context.req_id if hint is not None else None)

    def submit_load(self, job_metadata: TransferJob) -> None:
        """Reads the job's blocks from kvtierd into the primary tier's chunks; a key counts as
        loaded only when its block came back whole."""
        job = job_metadata
        keys = list(job.keys)
        chunks = self._chunks(job.chunk_ids)

        def load() -> None:
            start = time.perf_counter()
            try:
                sizes: list[Any] = self._client._impl.get_into(self._keys(keys), chunks)
                ok = [
                    isinstance(s, int) and s == len(c) for s, c in zip(sizes, chunks, strict=True)
                ]
            except Error:
                ok = [False] * len(keys)
            loaded = [k for k, good in zip(keys, ok, strict=True) if good]
            result = JobResult(
                job.job_id, all(ok), successful_keys=None if all(ok) else tuple(loaded),
                transfer_time=time.perf_counter() - start,
                transfer_bytes=len(loaded) * self.block_size_bytes,
            )  # fmt: skip
            failed = [k for k, good in zip(keys, ok, strict=True) if not good]
            self._finished.put((result, "load", failed))

        self._submit(load)

    def get_finished_jobs(self) -> Iterable[JobResult]:
        out: list[JobResult] = []
        while True:
            try:
                result, kind, keys = self._finished.get_nowait()
            except queue.Empty:
                return out
            if kind == "load" and keys:
                self._lookups.mark_miss(keys)  # Failed loads: misses from now on, recomputed.
            if kind == "store" and keys and self._events is not None:
                self._events.append(
                    OffloadingEvent(keys=keys, medium=self.medium, removed=False,
                                    locality=self.locality)
                )  # fmt: skip
            out.append(result)

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        hint = from_vllm(req_context.kv_transfer_params, req_context.kv_hints)
        if hint is not None:
            req_context.set_state(hint)
        return RequestOffloadingContext()

    def drain_jobs(self) -> None:
        with self._jobs_mu:
            jobs = list(self._jobs)
        wait(jobs)

    def take_events(self) -> Iterable[OffloadingEvent]:
        if self._events is None:
            return []
        events, self._events = self._events, []
        return events

    def has_pending_work(self) -> bool:
        with self._jobs_mu:
            return bool(self._jobs)

    def on_request_finished(self, req_context: ReqContext) -> None:
        self._lookups.cleanup(req_context.req_id)
        with self._jobs_mu:
            stores = self._session_stores.pop(req_context.req_id, [])
        hint = req_context.get_state(SessionHint)
        if hint is None or not hint.says_something:
            return

        def send() -> None:
            # vLLM submits a request's last store before it finishes the request, and the pool
            # runs jobs in order: these are running or done, never queued behind this one.
            wait(stores)
            try:
                self._client.hint_session(
                    hint.session, retain_s=hint.retain_s, finished=hint.finished,
                    priority=hint.priority,
                )  # fmt: skip
            except Error as e:  # Advisory: NotFound when none of its blocks is in DRAM.
                log.debug("kvtier: session hint of request %s: %s", req_context.req_id, e)

        self._submit(send)

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        self._lookups.flush()

    def shutdown(self) -> None:
        self._lookups.shutdown()
        self._pool.shutdown(wait=True)
        self._client.close()
        self._flat.release()


__all__ = ["KV_HINT_ACTION", "KvtierTier", "namespace_model"]
