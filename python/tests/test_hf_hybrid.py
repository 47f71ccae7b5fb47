"""kvtier.hf with hybrid and sliding-window architectures of the pinned transformers (5.24):
Qwen3-Next (Gated DeltaNet linear-attention layers beside full attention, and experts) and
gpt-oss (sliding-window layers beside full attention, and experts), small and randomly
initialised. One process prefills and stores through kvtierd and exits; another reloads the KV
and the state and continues."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import Daemon
from transformers import (
    AutoModelForCausalLM,
    DynamicCache,
    GptOssConfig,
    GptOssForCausalLM,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)

import kvtier
import kvtier.hf

BLOCK = 8
PROMPT = 45  # 5 whole blocks before the last token; the state is stored after block 5.


def qwen3_next() -> Any:
    config = Qwen3NextConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=32,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
        shared_expert_intermediate_size=64, max_position_embeddings=4096,
        full_attention_interval=2,
    )  # fmt: skip
    return Qwen3NextForCausalLM(config).to(torch.bfloat16)


def gpt_oss() -> Any:
    config = GptOssConfig(
        vocab_size=512, hidden_size=64, intermediate_size=64, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
        num_experts_per_tok=2, sliding_window=16, max_position_embeddings=4096,
        layer_types=["sliding_attention", "full_attention"] * 2,
    )  # fmt: skip
    return GptOssForCausalLM(config)


MODELS = {"qwen3-next": qwen3_next, "gpt-oss": gpt_oss}


@pytest.fixture(scope="module", params=list(MODELS))
def model_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(1234)
    out = tmp_path_factory.mktemp(request.param)
    MODELS[request.param]().save_pretrained(out)
    return out


def load(model_dir: Path) -> Any:
    return AutoModelForCausalLM.from_pretrained(model_dir).eval()


def prompt() -> list[int]:
    return torch.randint(0, 512, (PROMPT,), generator=torch.Generator().manual_seed(7)).tolist()


def greedy(model: Any, logits: torch.Tensor, cache: Any, steps: int) -> tuple[list[int], list[Any]]:
    """Greedy decoding from the last position's logits: the tokens and every step's logits."""
    tokens, all_logits = [], [logits]
    with torch.no_grad():
        for _ in range(steps):
            nxt = int(all_logits[-1].argmax(-1))
            tokens.append(nxt)
            out = model(torch.tensor([[nxt]]), cache=cache, use_cache=True)
            all_logits.append(out.logits[:, -1])
    return tokens, all_logits


def test_a_hybrid_prefix_stored_by_one_process_is_continued_exactly_by_another(
    model_dir: Path, daemon: Daemon
) -> None:
    tokens = prompt()
    writer = textwrap.dedent(
        f"""
        import torch, kvtier, kvtier.hf
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained({str(model_dir)!r}).eval()
        ns = kvtier.hf.namespace_for(model, tokens_per_block={BLOCK})
        with kvtier.Client({daemon.unix_url!r}) as c:
            logits, cache, reloaded = kvtier.hf.prefill(model, torch.tensor([{tokens!r}]), c, ns)
        print(reloaded, cache.get_seq_length())
        """
    )
    out = subprocess.run([sys.executable, "-c", writer], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["0", str(PROMPT)]

    model = load(model_dir)
    ns = kvtier.hf.namespace_for(model, tokens_per_block=BLOCK)
    with kvtier.Client(daemon.unix_url) as c:
        # kvtierd resumes only where the state is: after block 5, not after 1..4.
        keys = kvtier.block_keys(ns, tokens[:-1])
        m = c.lookup_resume(keys, [kvtier.StateGroup(kvtier.hf.STATE_GROUP)], all_lengths=True)
        assert (m.kv_blocks, m.resumable) == (5, [5])
        cache, cached = kvtier.hf.load_prefix(c, ns, tokens, config=model.config)
        assert cached == 40 and cache is not None
        logits_reloaded, _, reloaded = kvtier.hf.prefill(model, torch.tensor([tokens]), c, ns)
        assert reloaded == 40
    with torch.no_grad():
        resumed = model(torch.tensor([tokens[40:]]), cache=cache, use_cache=True).logits[:, -1]
        # The same prompt computed here as the writer did: up to the block boundary, then on.
        own = DynamicCache(config=model.config)
        model(torch.tensor([tokens[:40]]), cache=own, use_cache=True)
        computed = model(torch.tensor([tokens[40:]]), cache=own, use_cache=True).logits[:, -1]
        # One prefill of all 45 tokens runs other kernel shapes (chunked linear attention,
        # other matmuls): equal up to rounding only.
        single = model(torch.tensor([tokens])).logits[:, -1]
    # The reloaded KV and state are the writer's bytes, and the same operations follow.
    assert torch.equal(resumed, computed)
    assert torch.equal(logits_reloaded, computed)
    tolerance = 3e-2 if model.dtype == torch.bfloat16 else 1e-4
    assert torch.allclose(resumed.float(), single.float(), atol=tolerance, rtol=0)
    gen_resumed, logits_a = greedy(model, resumed, cache, 12)
    gen_computed, logits_b = greedy(model, computed, own, 12)
    assert gen_resumed == gen_computed
    assert all(torch.equal(a, b) for a, b in zip(logits_a, logits_b, strict=True))


def test_without_its_state_a_hybrid_prefix_is_computed_again(
    model_dir: Path, daemon: Daemon
) -> None:
    model = load(model_dir)
    ns = kvtier.hf.namespace_for(model, tokens_per_block=BLOCK)
    tokens = prompt()
    with kvtier.Client(daemon.unix_url) as c:
        kvtier.hf.prefill(model, torch.tensor([tokens]), c, ns)
        keys = kvtier.block_keys(ns, tokens[:-1])
        state = kvtier.state_key(keys[-1], kvtier.hf.STATE_GROUP)
        assert c.delete(state)
        # The KV is all there, but no state: nothing to resume from, never a partial state.
        assert c.lookup_prefix(keys).num_blocks == 5
        assert kvtier.hf.load_prefix(c, ns, tokens, config=model.config) == (None, 0)
        # A state of the wrong shape under the right key is refused, not loaded.
        c.put_atomic([state], [b"KVTHFS1\0" + b"\xff" * 64], parents=[keys[-1]],
                     role=kvtier.Role.STATE)  # fmt: skip
        assert kvtier.hf.load_prefix(c, ns, tokens, config=model.config) == (None, 0)


def test_a_hybrid_cache_off_a_block_boundary_is_refused(model_dir: Path, daemon: Daemon) -> None:
    model = load(model_dir)
    ns = kvtier.hf.namespace_for(model, tokens_per_block=BLOCK)
    tokens = prompt()
    with torch.no_grad():
        cache = model(torch.tensor([tokens[:43]]), use_cache=True).past_key_values
    with kvtier.Client(daemon.unix_url) as c:
        with pytest.raises(kvtier.InvalidArgument, match="block boundary"):
            kvtier.hf.store_prefix(c, ns, tokens[:43], cache)
        assert c.lookup_prefix(kvtier.block_keys(ns, tokens[:43])).num_blocks == 0
