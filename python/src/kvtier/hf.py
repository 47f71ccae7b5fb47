"""kvtier for Hugging Face transformers (tested with transformers 5.24; supported: 5.x).

A prefill's KV cache becomes kvtier blocks, one per ``tokens_per_block`` tokens, and blocks
become a cache the model continues from: a session that comes back reloads its prefix instead
of recomputing it::

    ns = kvtier.hf.namespace_for(model, "llama-3.1-8b@0e9e39f", tokens_per_block=256)
    out = model(input_ids, use_cache=True)
    kvtier.hf.store_prefix(client, ns, tokens, out.past_key_values)
    ...                                          # later, in any process on any node
    cache, cached = kvtier.hf.load_prefix(client, ns, tokens)
    out = model(input_ids[:, cached:], cache=cache, use_cache=True)

A block holds every layer's K and V for its tokens, as the cache keeps them (keys after RoPE),
in the cache's dtype, laid out ``[layer][K, V][kv_head][token][head_dim]`` and contiguous. The
keys are :func:`kvtier.block_keys` of the prompt's tokens in the namespace, chained so that
kvtierd evicts tails first. Batch size 1.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache

from ._client import Client, ShmClient
from ._errors import InvalidArgument
from ._kvtier import Namespace, block_keys

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


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
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    return Namespace(
        tenant,
        model_id or model_fingerprint(model),
        num_layers=c.num_hidden_layers,
        num_kv_heads=getattr(c, "num_key_value_heads", None) or heads,
        head_dim=head_dim,
        dtype=dtype,
        tokens_per_block=tokens_per_block,
        tp_rank=tp_rank,
        tp_size=tp_size,
    )


def _layers(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def cache_to_blocks(cache: Any, tokens_per_block: int, start_block: int = 0) -> torch.Tensor:
    """The whole blocks of ``cache`` from block ``start_block`` on, as one contiguous tensor
    ``[block][layer][K, V][kv_head][token][head_dim]`` (a trailing partial block is left out)."""
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
    """A DynamicCache holding ``blocks`` (as :func:`cache_to_blocks` lays them out), in order."""
    n, layers, _, heads, b, dim = blocks.shape
    # [n][layer][K, V][head][B][dim] -> [layer][K, V][head][n * B][dim]
    kv = blocks.permute(1, 2, 3, 0, 4, 5).reshape(layers, 2, heads, n * b, dim)
    cache = DynamicCache(config=config) if config is not None else DynamicCache()
    for layer in range(layers):
        cache.update(kv[layer, 0][None].contiguous(), kv[layer, 1][None].contiguous(), layer)
    return cache


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
    ``skip_blocks`` leading blocks are known to be stored already (a reloaded prefix)."""
    keys = block_keys(namespace, _token_list(tokens))
    blocks = cache_to_blocks(cache, namespace.tokens_per_block, skip_blocks)
    n = min(len(keys) - skip_blocks, blocks.shape[0])
    if n <= 0:
        return 0
    parents: list[bytes | None] = [keys[skip_blocks - 1] if skip_blocks else None]
    parents += keys[skip_blocks : skip_blocks + n - 1]
    client.put_many(
        keys[skip_blocks : skip_blocks + n],
        [blocks[i] for i in range(n)],
        parents=parents,
        session=session,
        dtype=blocks.dtype,
    )
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
    compute the next token's logits from. The blocks are read straight into one tensor."""
    ids = _token_list(tokens)
    keys = block_keys(namespace, ids[:-1])
    if not keys:
        return None, 0
    # Shared memory has no prefix lookup: there a miss ends the prefix below.
    found = len(keys) if isinstance(client, ShmClient) else client.lookup_prefix(keys).num_blocks
    if found == 0:
        return None, 0
    b = namespace.tokens_per_block
    shape = (found, namespace.num_layers, 2, namespace.num_kv_heads, b, namespace.head_dim)
    blocks = torch.empty(shape, dtype=dtype or _torch_dtype(namespace.dtype))
    sizes = client.get_into(keys[:found], [blocks[i] for i in range(found)])
    block_bytes = blocks[0].numel() * blocks.element_size()
    # A block evicted since the lookup (or never there, over shared memory) ends the prefix.
    n = next((i for i, s in enumerate(sizes) if s != block_bytes), found)
    if n == 0:
        return None, 0
    return blocks_to_cache(blocks[:n], config), n * b


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
    "blocks_to_cache",
    "cache_to_blocks",
    "load_prefix",
    "model_fingerprint",
    "namespace_for",
    "store_prefix",
]
