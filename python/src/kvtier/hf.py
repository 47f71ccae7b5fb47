"""kvtier for Hugging Face transformers (tested with transformers 5.24; supported: 5.x).

A prefill's KV cache becomes kvtier blocks, one per ``tokens_per_block`` tokens, and blocks
become a cache the model continues from: a session that comes back reloads its prefix instead
of recomputing it::

    ns = kvtier.hf.namespace_for(model, "llama-3.1-8b@0e9e39f", tokens_per_block=256)
    logits, cache, reloaded = kvtier.hf.prefill(model, input_ids, client, ns)
    ...                                          # later, in any process on any node
    cache, cached = kvtier.hf.load_prefix(client, ns, tokens, config=model.config)
    out = model(input_ids[:, cached:], cache=cache, use_cache=True)

A block holds the K and V of every full-attention layer for its tokens, as the cache keeps them
(keys after RoPE), in the cache's dtype, laid out ``[layer][K, V][kv_head][token][head_dim]``
and contiguous. The keys are :func:`kvtier.block_keys` of the prompt's tokens in the namespace,
chained so that kvtierd evicts tails first. Batch size 1.

Hybrid and sliding-window models (``docs/state.md``): layers that keep a recurrent or
linear-attention state (Qwen3-Next, Qwen3.5, Nemotron-H, ...) or only a sliding window of
tokens (gpt-oss, Gemma 3, ...) resume from a state, not from per-token KV. Their state at a
block boundary (each linear layer's conv and recurrent states, each sliding layer's retained
keys and values) is one kvtier state value of group ``hf-state`` at that block, stored in one
atomic put with the block; :func:`load_prefix` resumes only where such a state is, so the model
never continues from a partial state. The state must be taken at a block boundary: a cache
whose length is not a multiple of ``tokens_per_block`` has none to store (:func:`prefill`
computes up to the boundary, stores, then computes the rest).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import (
    DynamicLayer,
    DynamicSlidingWindowLayer,
    LinearAttentionCacheLayerMixin,
    LinearAttentionLayer,
)

from ._client import Client, ShmClient
from ._errors import Error, InvalidArgument
from ._kvtier import Namespace, block_keys, state_key
from ._types import Role, StateGroup

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}

#: The state group of a hybrid or sliding-window model's cache: one value per block boundary.
STATE_GROUP = "hf-state"
_STATE_MAGIC = b"KVTHFS1\0"


@dataclass
class CachePlan:
    """What each layer of a model's cache holds: ``full`` the layers with full attention (their
    KV goes into blocks), ``sliding`` those with a window of tokens, ``linear`` those with a
    recurrent or linear-attention state (a layer may be in two lists)."""

    full: list[int] = field(default_factory=list)
    sliding: list[int] = field(default_factory=list)
    linear: list[int] = field(default_factory=list)

    @property
    def needs_state(self) -> bool:
        return bool(self.sliding or self.linear)


def cache_plan(cache: Any) -> CachePlan:
    """Classifies the layers of a transformers cache; :class:`kvtier.InvalidArgument` for a
    layer kind kvtier does not know how to store."""
    plan = CachePlan()
    for i, layer in enumerate(cache.layers):
        known = False
        if isinstance(layer, LinearAttentionCacheLayerMixin):
            if not isinstance(layer, LinearAttentionLayer):
                raise InvalidArgument(f"layer {i}: {type(layer).__name__} is not supported")
            plan.linear.append(i)
            known = True
        if isinstance(layer, DynamicSlidingWindowLayer):
            plan.sliding.append(i)
        elif type(layer) is DynamicLayer or (known and isinstance(layer, DynamicLayer)):
            plan.full.append(i)
        elif not known:
            raise InvalidArgument(f"layer {i}: {type(layer).__name__} is not supported")
    if plan.needs_state and not plan.full:
        raise InvalidArgument("a model without full-attention layers has no KV to key its state by")
    return plan


def model_fingerprint(model: Any) -> str:
    """``<name>@<first 16 hex digits of SHA-256 over every parameter's bytes>``: equal only for
    the same weights, so that a fine-tune never reads its base model's cache. Reads every
    weight once; pass your own ``name@revision`` to :func:`namespace_for` for large models."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    name = getattr(model.config, "_name_or_path", "") or model.config.model_type
    return f"{name}@{h.hexdigest()[:16]}"


def namespace_for(
    model: Any,
    model_id: str | None = None,
    *,
    tenant: str = "default",
    tokens_per_block: int = 256,
    tp_rank: int = 0,
    tp_size: int = 1,
) -> Namespace:
    """The namespace of ``model``'s KV: its layer count, KV heads, head size and dtype, with
    ``model_id`` (``name@revision``; default :func:`model_fingerprint`) naming the weights."""
    c = model.config
    dtype = _DTYPES.get(model.dtype)
    if dtype is None:
        raise InvalidArgument(f"KV of dtype {model.dtype} is not supported: bf16, fp16 or fp32")
    c = c.get_text_config(decoder=True)
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    return Namespace(
        tenant,
        model_id or model_fingerprint(model),
        num_layers=len(cache_plan(DynamicCache(config=c)).full),
        num_kv_heads=getattr(c, "num_key_value_heads", None) or heads,
        head_dim=head_dim,
        dtype=dtype,
        tokens_per_block=tokens_per_block,
        tp_rank=tp_rank,
        tp_size=tp_size,
    )


def _layers(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(cache.layers[i].keys, cache.layers[i].values) for i in cache_plan(cache).full]


def cache_to_blocks(cache: Any, tokens_per_block: int, start_block: int = 0) -> torch.Tensor:
    """The whole blocks of ``cache`` from block ``start_block`` on, as one contiguous tensor
    ``[block][layer][K, V][kv_head][token][head_dim]`` over its full-attention layers (a
    trailing partial block is left out)."""
    layers = _layers(cache)
    if not layers:
        raise InvalidArgument("the cache holds no layer")
    k0 = layers[0][0]
    if k0.shape[0] != 1:
        raise InvalidArgument(f"batch size {k0.shape[0]}: kvtier.hf stores one sequence at a time")
    n = k0.shape[2] // tokens_per_block - start_block
    if n <= 0:
        return k0.new_empty((0, len(layers), 2, k0.shape[1], tokens_per_block, k0.shape[3]))
    span = slice(start_block * tokens_per_block, (start_block + n) * tokens_per_block)
    # [layer][K, V][head][n * B][dim] -> [n][layer][K, V][head][B][dim]
    kv = torch.stack([torch.stack((k[0, :, span], v[0, :, span])) for k, v in layers])
    heads, dim = kv.shape[2], kv.shape[4]
    kv = kv.view(len(layers), 2, heads, n, tokens_per_block, dim)
    return kv.permute(3, 0, 1, 2, 4, 5).contiguous()


def blocks_to_cache(blocks: torch.Tensor, config: Any = None) -> DynamicCache:
    """A DynamicCache (of ``config``'s layer kinds) holding ``blocks`` (as
    :func:`cache_to_blocks` lays them out) in its full-attention layers, in order."""
    n, layers, _, heads, b, dim = blocks.shape
    # [n][layer][K, V][head][B][dim] -> [layer][K, V][head][n * B][dim]
    kv = blocks.permute(1, 2, 3, 0, 4, 5).reshape(layers, 2, heads, n * b, dim)
    cache = DynamicCache(config=config) if config is not None else DynamicCache()
    full = cache_plan(cache).full if config is not None else list(range(layers))
    if len(full) != layers:
        raise InvalidArgument(f"{layers} layers of KV for a model with {len(full)} full ones")
    for i, layer in enumerate(full):
        cache.update(kv[i, 0][None].contiguous(), kv[i, 1][None].contiguous(), layer)
    return cache


def state_to_bytes(cache: Any) -> bytes:
    """The state of a hybrid or sliding-window cache at its current length: a header naming
    each tensor (linear layers' conv and recurrent states, sliding layers' retained keys and
    values), then their bytes."""
    plan = cache_plan(cache)
    tensors: list[tuple[str, torch.Tensor]] = []
    for i in plan.sliding:
        layer = cache.layers[i]
        tensors += [(f"{i}.k", layer.keys), (f"{i}.v", layer.values)]
    for i in plan.linear:
        layer = cache.layers[i]
        for s in range(layer.number_of_states):
            if layer.is_conv_states_initialized[s]:
                tensors.append((f"{i}.conv{s}", layer.conv_states[s]))
            if layer.is_recurrent_states_initialized[s]:
                tensors.append((f"{i}.rec{s}", layer.recurrent_states[s]))
    header = {
        "tokens": cache.get_seq_length(),
        "tensors": [
            [name, str(t.dtype).removeprefix("torch."), list(t.shape)] for name, t in tensors
        ],
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    parts = [_STATE_MAGIC, struct.pack("<I", len(head)), head]
    parts += [
        t.detach().contiguous().view(torch.uint8).reshape(-1).numpy().tobytes() for _, t in tensors
    ]
    return b"".join(parts)


def state_from_bytes(cache: Any, data: bytes | memoryview) -> int:
    """Puts a state of :func:`state_to_bytes` into ``cache`` (of the same model, its
    full-attention layers already holding the KV of the state's tokens) and returns its length
    in tokens. :class:`kvtier.InvalidArgument` when the value is not a state of this model's
    layers, and the cache is then unusable."""
    plan = cache_plan(cache)
    view = memoryview(data).cast("B")
    if bytes(view[:8]) != _STATE_MAGIC or len(view) < 12:
        raise InvalidArgument("not a kvtier.hf state value")
    (n,) = struct.unpack("<I", view[8:12])
    try:
        header = json.loads(bytes(view[12 : 12 + n]))
        tokens = int(header["tokens"])
        entries = [
            (str(a), getattr(torch, str(b)), [int(x) for x in c]) for a, b, c in header["tensors"]
        ]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise InvalidArgument(f"malformed kvtier.hf state header: {e}") from None
    names = {name for name, _, _ in entries}
    sliding = {f"{i}.{k}" for i in plan.sliding for k in ("k", "v")}
    linear = {name.split(".")[0] for name in names - sliding}
    if not sliding <= names or linear != {str(i) for i in plan.linear}:
        raise InvalidArgument("the state value holds other layers than this model has")
    offset = 12 + n
    found: dict[str, torch.Tensor] = {}
    for name, dtype, shape in entries:
        size = int(torch.Size(shape).numel()) * torch.empty((), dtype=dtype).element_size()
        if offset + size > len(view):
            raise InvalidArgument("the state value is shorter than its header says")
        raw = torch.frombuffer(bytearray(view[offset : offset + size]), dtype=torch.uint8)
        found[name] = raw.view(dtype).reshape(shape)
        offset += size
    if offset != len(view):
        raise InvalidArgument("the state value is longer than its header says")
    for i in plan.sliding:
        layer = cache.layers[i]
        DynamicLayer.update(layer, found[f"{i}.k"], found[f"{i}.v"])
        layer.cumulative_length = tokens
    for i in plan.linear:
        layer = cache.layers[i]
        for s in range(layer.number_of_states):
            conv, rec = found.get(f"{i}.conv{s}"), found.get(f"{i}.rec{s}")
            if conv is not None:
                LinearAttentionLayer.lazy_initialization(
                    layer, conv_states=conv, state_idx=s, conv_kernel_size=conv.shape[-1]
                )
                layer.conv_states[s].copy_(conv)
                layer.has_previous_state[s] = True
            if rec is not None:
                LinearAttentionLayer.lazy_initialization(layer, recurrent_states=rec, state_idx=s)
                layer.recurrent_states[s].copy_(rec)
                layer.has_previous_state[s] = True
    return tokens


def store_prefix(
    client: Client | ShmClient,
    namespace: Namespace,
    tokens: Sequence[int] | torch.Tensor,
    cache: Any,
    *,
    session: int = 0,
    skip_blocks: int = 0,
) -> int:
    """Stores the whole blocks of ``cache``, the KV of ``tokens``, and returns how many.
    ``skip_blocks`` leading blocks are known to be stored already (a reloaded prefix).

    A hybrid or sliding-window model's cache is stored with its state, in one atomic put with
    its last block (:class:`kvtier.Client` only): its length must be a multiple of
    ``tokens_per_block`` (:class:`kvtier.InvalidArgument` otherwise; see :func:`prefill`)."""
    keys = block_keys(namespace, _token_list(tokens))
    plan = cache_plan(cache)
    b = namespace.tokens_per_block
    if plan.needs_state:
        if not isinstance(client, Client):
            raise InvalidArgument("a hybrid model's state travels with kvtier.Client only")
        if cache.get_seq_length() % b != 0:
            raise InvalidArgument(
                f"the state of a cache of {cache.get_seq_length()} tokens is not at a block "
                f"boundary of {b} tokens: prefill up to the boundary, store, then the rest"
            )
    blocks = cache_to_blocks(cache, b, skip_blocks)
    n = min(len(keys) - skip_blocks, blocks.shape[0])
    if n <= 0:
        return 0
    chunk = keys[skip_blocks : skip_blocks + n]
    parents: list[bytes | None] = [keys[skip_blocks - 1] if skip_blocks else None, *chunk[:-1]]
    values = [blocks[i] for i in range(n)]
    if not plan.needs_state:
        client.put_many(chunk, values, parents=parents, session=session, dtype=blocks.dtype)
        return n
    assert isinstance(client, Client)
    kv = Role.KV_NEEDS_STATE
    if n > 1:
        client.put_many(
            chunk[:-1], values[:-1], parents=parents[:-1], session=session, dtype=blocks.dtype,
            role=kv,
        )  # fmt: skip
    if (skip_blocks + n) * b != cache.get_seq_length():
        return n  # The cache ends past the tokens given: its state is not theirs.
    state = state_to_bytes(cache)
    client.put_atomic(
        [chunk[-1], state_key(chunk[-1], STATE_GROUP)], [values[-1], state],
        parents=[parents[-1], chunk[-1]], session=session, role=[kv, Role.STATE],
    )  # fmt: skip
    return n


def load_prefix(
    client: Client | ShmClient,
    namespace: Namespace,
    tokens: Sequence[int] | torch.Tensor,
    *,
    config: Any = None,
    dtype: torch.dtype | None = None,
) -> tuple[DynamicCache | None, int]:
    """The longest stored prefix of ``tokens`` as a cache, and its length in tokens (None, 0
    when nothing is stored). At least the last token is left out, so that the model has one to
    compute the next token's logits from. The blocks are read straight into one tensor.

    With ``config`` (the model's), the cache has the model's layer kinds; for a hybrid or
    sliding-window model the prefix is the longest one whose state is stored, and the state is
    put back with the KV (a model that needs state also needs ``config``)."""
    ids = _token_list(tokens)
    keys = block_keys(namespace, ids[:-1])
    if not keys:
        return None, 0
    needs_state = config is not None and cache_plan(DynamicCache(config=config)).needs_state
    if needs_state and not isinstance(client, Client):
        raise InvalidArgument("a hybrid model's state travels with kvtier.Client only")
    if needs_state:
        assert isinstance(client, Client)
        found = client.lookup_resume(keys, [StateGroup(STATE_GROUP, 1)]).resume_blocks
    elif isinstance(client, ShmClient):
        found = len(keys)  # Shared memory has no prefix lookup: a miss ends the prefix below.
    else:
        found = client.lookup_prefix(keys).num_blocks
    if found == 0:
        return None, 0
    b = namespace.tokens_per_block
    shape = (found, namespace.num_layers, 2, namespace.num_kv_heads, b, namespace.head_dim)
    blocks = torch.empty(shape, dtype=dtype or _torch_dtype(namespace.dtype))
    sizes = client.get_into(keys[:found], [blocks[i] for i in range(found)])
    block_bytes = blocks[0].numel() * blocks.element_size()
    # A block evicted since the lookup (or never there, over shared memory) ends the prefix.
    n = next((i for i, s in enumerate(sizes) if s != block_bytes), found)
    if not needs_state:
        return (None, 0) if n == 0 else (blocks_to_cache(blocks[:n], config), n * b)
    assert isinstance(client, Client)
    # The state is at block `found`: a block or the state gone since the lookup (evicted in
    # between) leaves no resume point here, and the model computes the prefix again.
    state = client.get(state_key(keys[found - 1], STATE_GROUP)) if n == found else None
    if state is None:
        return None, 0
    cache = blocks_to_cache(blocks, config)
    try:
        if state_from_bytes(cache, state) != found * b:
            return None, 0
    except (InvalidArgument, Error):
        return None, 0
    return cache, found * b


def prefill(
    model: Any,
    input_ids: torch.Tensor,
    client: Client,
    namespace: Namespace,
    *,
    session: int = 0,
) -> tuple[torch.Tensor, DynamicCache, int]:
    """A prefill of ``input_ids`` (batch 1) through kvtier: reloads the longest stored prefix,
    computes up to the last block boundary before the last token and stores the new whole
    blocks there (with the state, for a hybrid model), then computes the rest. Returns the
    last position's logits, the cache, and how many tokens were reloaded."""
    ids = input_ids.reshape(1, -1)
    total = ids.shape[1]
    cache, reloaded = load_prefix(client, namespace, ids[0], config=model.config)
    if cache is None:
        cache = DynamicCache(config=model.config)
    b = namespace.tokens_per_block
    boundary = (total - 1) // b * b
    logits = None
    with torch.no_grad():
        if boundary > reloaded:
            out = model(ids[:, reloaded:boundary], cache=cache, use_cache=True)
            logits = out.logits[:, -1]
            store_prefix(client, namespace, ids[0, :boundary], cache, session=session,
                         skip_blocks=reloaded // b)  # fmt: skip
        start = max(boundary, reloaded)
        if start < total:
            out = model(ids[:, start:], cache=cache, use_cache=True)
            logits = out.logits[:, -1]
    assert logits is not None
    return logits, cache, reloaded


def _token_list(tokens: Sequence[int] | torch.Tensor) -> list[int]:
    if isinstance(tokens, torch.Tensor):
        return [int(t) for t in tokens.reshape(-1).tolist()]
    return [int(t) for t in tokens]


def _torch_dtype(name: str) -> torch.dtype:
    for dtype, n in _DTYPES.items():
        if n == name:
            return dtype
    raise InvalidArgument(f"namespace dtype {name!r} has no torch dtype here")


__all__ = [
    "STATE_GROUP",
    "CachePlan",
    "blocks_to_cache",
    "cache_plan",
    "cache_to_blocks",
    "load_prefix",
    "model_fingerprint",
    "namespace_for",
    "prefill",
    "state_from_bytes",
    "state_to_bytes",
    "store_prefix",
]
