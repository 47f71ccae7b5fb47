"""kvtier.hf with a real model: the stories260K weights (../shared/data), converted by
python/tools/llama2c_to_hf.py into a transformers Llama checkpoint, against kvtier's C++
reference engine (`kvtier kv dump`), and a prefix stored by one process through kvtierd and
continued by another."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import ROOT, Daemon
from transformers import LlamaForCausalLM

import kvtier
import kvtier.hf

DATA = Path(os.environ.get("KVTIER_MODEL_DIR", ROOT.parent / "shared" / "data"))
CLI = os.environ.get("KVTIER_CLI", str(ROOT / "build/release/tools/kvtier"))
BLOCK = 8
POSITIONS = 64


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("stories260K-hf")
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "python/tools/llama2c_to_hf.py"),
            str(DATA / "stories260K.bin"),
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor | list[int]]:
    """The reference engine's greedy tokens from "Once upon a time", and its fp32 K and V."""
    out = tmp_path_factory.mktemp("kv-dump")
    subprocess.run(
        [
            CLI,
            "kv",
            "dump",
            "--model-dir",
            str(DATA),
            "--positions",
            str(POSITIONS),
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    meta = json.loads((out / "k.fp32.json").read_text())
    shape = meta["shape"]  # [layer][position][kv_head][head_dim]
    k = torch.frombuffer(bytearray((out / "k.fp32.bin").read_bytes()), dtype=torch.float32)
    v = torch.frombuffer(bytearray((out / "v.fp32.bin").read_bytes()), dtype=torch.float32)
    return {"tokens": meta["tokens"], "k": k.view(shape), "v": v.view(shape)}


def load(hf_dir: Path) -> LlamaForCausalLM:
    return LlamaForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()


def test_the_converted_model_is_the_reference_engine(hf_dir: Path, reference: dict) -> None:
    model = load(hf_dir)
    tokens = reference["tokens"]
    with torch.no_grad():
        out = model.generate(
            torch.tensor([tokens[:8]]), max_new_tokens=POSITIONS - 8, do_sample=False
        )
        cache = model(torch.tensor([tokens]), use_cache=True).past_key_values
    assert out[0].tolist() == tokens, "greedy continuations differ"
    # The same KV: V as it is; K in transformers' rotary channel order (halves, not pairs).
    head_dim = reference["k"].shape[-1]
    order = [*range(0, head_dim, 2), *range(1, head_dim, 2)]
    for layer, (k, v) in enumerate((lay.keys, lay.values) for lay in cache.layers):
        ref_k = reference["k"][layer][..., order].permute(1, 0, 2)
        ref_v = reference["v"][layer].permute(1, 0, 2)
        assert torch.allclose(k[0], ref_k, atol=2e-5), f"K of layer {layer}"
        assert torch.allclose(v[0], ref_v, atol=2e-5), f"V of layer {layer}"


def test_blocks_round_trip_the_cache_exactly(hf_dir: Path) -> None:
    model = load(hf_dir)
    with torch.no_grad():
        cache = model(torch.arange(1, 30)[None], use_cache=True).past_key_values
    blocks = kvtier.hf.cache_to_blocks(cache, BLOCK)
    assert blocks.shape == (3, 5, 2, 4, BLOCK, 8)  # 29 tokens: 3 whole blocks.
    back = kvtier.hf.blocks_to_cache(blocks)
    for a, b in zip(cache.layers, back.layers, strict=True):
        assert torch.equal(a.keys[:, :, : 3 * BLOCK], b.keys)
        assert torch.equal(a.values[:, :, : 3 * BLOCK], b.values)


def test_a_prefix_stored_by_one_process_is_continued_by_another(
    hf_dir: Path, reference: dict, daemon: Daemon
) -> None:
    tokens = reference["tokens"][:41]  # 5 whole blocks of the 40 tokens before the last.
    writer = textwrap.dedent(
        f"""
        import torch, kvtier, kvtier.hf
        from transformers import LlamaForCausalLM
        model = LlamaForCausalLM.from_pretrained({str(hf_dir)!r}, dtype=torch.float32).eval()
        ns = kvtier.hf.namespace_for(model, tokens_per_block={BLOCK})
        with torch.no_grad():
            cache = model(torch.tensor([{tokens[:40]!r}]), use_cache=True).past_key_values
        with kvtier.Client({daemon.unix_url!r}) as c:
            print(kvtier.hf.store_prefix(c, ns, {tokens[:40]!r}, cache))
        """
    )
    stored = subprocess.run(
        [sys.executable, "-c", writer], capture_output=True, text=True, check=True
    )
    assert stored.stdout.split()[-1] == "5"

    model = load(hf_dir)
    ns = kvtier.hf.namespace_for(model, tokens_per_block=BLOCK)
    with kvtier.Client(daemon.unix_url) as c:
        cache, cached = kvtier.hf.load_prefix(c, ns, tokens)
    assert cached == 40 and cache is not None
    with torch.no_grad():
        reloaded = model(torch.tensor([tokens[40:]]), cache=cache, use_cache=True)
        # The same continuation from a prefix computed here: the same cache bytes, then the
        # same operations, so the logits are bit-identical.
        own = model(torch.tensor([tokens[:40]]), use_cache=True).past_key_values
        computed = model(torch.tensor([tokens[40:]]), cache=own, use_cache=True)
        # A single prefill of all 41 tokens runs other matmul shapes: equal up to rounding.
        full = model(torch.tensor([tokens])).logits[:, -1]
    assert torch.equal(reloaded.logits, computed.logits)
    assert torch.allclose(reloaded.logits[:, -1], full, atol=1e-4, rtol=0)
    # And it goes on as the session that computed its own prefix would (not necessarily as the
    # reference engine, token for token: a 40-token prefill rounds otherwise than 40 steps).
    with torch.no_grad():
        gen = {
            name: model.generate(
                torch.tensor([tokens]),
                cache=out.past_key_values,
                max_new_tokens=POSITIONS - 41,
                do_sample=False,
            )[0].tolist()
            for name, out in (("reloaded", reloaded), ("computed", computed))
        }
    assert gen["reloaded"] == gen["computed"]


def test_keys_of_another_model_or_tenant_never_match(hf_dir: Path, daemon: Daemon) -> None:
    model = load(hf_dir)
    tokens = list(range(1, 42))
    ns = kvtier.hf.namespace_for(model, tokens_per_block=BLOCK)
    with torch.no_grad():
        cache = model(torch.tensor([tokens]), use_cache=True).past_key_values
    with kvtier.Client(daemon.unix_url) as c:
        assert kvtier.hf.store_prefix(c, ns, tokens, cache) == 5
        with torch.no_grad():
            model.model.norm.weight.add_(1e-3)  # A fine-tune: other weights.
        other_model = kvtier.hf.namespace_for(model, tokens_per_block=BLOCK)
        assert other_model != ns
        assert kvtier.hf.load_prefix(c, other_model, tokens) == (None, 0)
        other_tp = kvtier.hf.namespace_for(model, ns.model, tokens_per_block=BLOCK, tp_size=2)
        assert kvtier.hf.load_prefix(c, other_tp, tokens) == (None, 0)
        assert kvtier.hf.load_prefix(c, ns, tokens)[1] == 40
    with kvtier.Client(daemon.unix_url, "acme-token") as acme:
        mine = kvtier.hf.namespace_for(model, ns.model, tenant="acme", tokens_per_block=BLOCK)
        assert kvtier.hf.load_prefix(acme, mine, tokens) == (None, 0)
