#!/usr/bin/env python3
"""Converts a llama2.c "legacy" checkpoint (such as ../shared/data/stories260K.bin) into a
Hugging Face transformers Llama checkpoint (config.json and model.safetensors).

The file is 7 little-endian int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
seq_len; a positive vocab_size means the classifier is the embedding) and then float32 weights
in llama2.c's order (../shared/data/README.md). Linear weights are [out][in] in both formats.
llama2.c rotates interleaved pairs of a head's channels, (2j, 2j+1); transformers rotates
halves, (j, j + head_dim/2): the rows of wq and wk are permuted within each head so that the
converted model computes the same function.

Usage: llama2c_to_hf.py CHECKPOINT OUT_DIR
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def _rope_halves(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows of a q or k projection from interleaved to half-split rotary order."""
    out_dim, in_dim = w.shape
    return w.view(heads, out_dim // heads // 2, 2, in_dim).transpose(1, 2).reshape(out_dim, in_dim)


def load_llama2c(path: Path) -> LlamaForCausalLM:
    data = path.read_bytes()
    dim, hidden, layers, heads, kv_heads, vocab, seq_len = struct.unpack("<7i", data[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    floats = np.frombuffer(data, dtype="<f4", offset=28)
    head = dim // heads
    kv_dim = kv_heads * head
    shapes = [
        ("tok", (vocab, dim)), ("rms_att", (layers, dim)), ("wq", (layers, dim, dim)),
        ("wk", (layers, kv_dim, dim)), ("wv", (layers, kv_dim, dim)), ("wo", (layers, dim, dim)),
        ("rms_ffn", (layers, dim)), ("w1", (layers, hidden, dim)), ("w2", (layers, dim, hidden)),
        ("w3", (layers, hidden, dim)), ("rms_final", (dim,)),
        ("freq_cis_real", (seq_len, head // 2)), ("freq_cis_imag", (seq_len, head // 2)),
    ]  # fmt: skip
    if not shared:
        shapes.append(("wcls", (vocab, dim)))
    w: dict[str, torch.Tensor] = {}
    at = 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        if at + n > floats.size:
            raise ValueError(f"{path} is truncated: it ends inside {name}")
        w[name] = torch.from_numpy(floats[at : at + n].copy()).view(shape)
        at += n
    if at != floats.size:
        raise ValueError(f"{path} has {floats.size - at} floats past its weights")

    config = LlamaConfig(
        hidden_size=dim, intermediate_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
        max_position_embeddings=seq_len, rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=shared, bos_token_id=1, eos_token_id=2, torch_dtype="float32",
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    state = {"model.embed_tokens.weight": w["tok"], "model.norm.weight": w["rms_final"]}
    for i in range(layers):
        p = f"model.layers.{i}."
        state[p + "input_layernorm.weight"] = w["rms_att"][i]
        state[p + "self_attn.q_proj.weight"] = _rope_halves(w["wq"][i], heads)
        state[p + "self_attn.k_proj.weight"] = _rope_halves(w["wk"][i], kv_heads)
        state[p + "self_attn.v_proj.weight"] = w["wv"][i]
        state[p + "self_attn.o_proj.weight"] = w["wo"][i]
        state[p + "post_attention_layernorm.weight"] = w["rms_ffn"][i]
        state[p + "mlp.gate_proj.weight"] = w["w1"][i]
        state[p + "mlp.down_proj.weight"] = w["w2"][i]
        state[p + "mlp.up_proj.weight"] = w["w3"][i]
    state["lm_head.weight"] = w["tok"] if shared else w["wcls"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [m for m in missing if "rotary" not in m]:
        raise ValueError(f"weights do not match the model: {missing} {unexpected}")
    return model.eval()


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    model = load_llama2c(Path(sys.argv[1]))
    model.save_pretrained(sys.argv[2])
    print(f"wrote {sys.argv[2]}: {sum(p.numel() for p in model.parameters())} parameters")


if __name__ == "__main__":
    main()
