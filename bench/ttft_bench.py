#!/usr/bin/env python3
"""Time to first token of a real engine (Hugging Face transformers on this CPU), cold against
the prefix reloaded from kvtierd, in one run:

  cold          the whole prompt prefilled
  warm G2       the prompt's whole blocks but the last tail reloaded from kvtierd's DRAM, the
                rest prefilled
  warm restart  the same after the engine process restarted (a new process, the same weights)
  warm G3       from kvtierd's NVMe tier (a kvtierd whose DRAM the prefix has left)
  warm G4       from the shared tier, through a second kvtierd sharing the G4 directory

The model (random weights, seeded, bf16, big enough that a 16K-token prefill takes seconds
here) is a Llama-style transformer (``llama``, the default) or a hybrid one (``qwen3-next``:
Qwen3-Next's architecture, Gated DeltaNet linear-attention layers alternating with full
attention, whose warm runs reload the KV of the attention layers and the linear layers' state at
the block boundary; ``docs/state.md``). TTFT is prefill plus the first token's argmax; every warm
run must pick the cold run's first token. Beside each measurement: `kvtier crossover`'s prediction
for the same model (its config.json) fed the matmul and attention FLOP rates measured from two
shorter prefills (on a CPU attention runs far below the matmul rate) and the engine's reload rate
from each tier, measured in the same run: kvtier.hf.load_prefix of the prefix, which reads it into
fresh memory and lays it out as the engine's cache. The link's rate (a raw get_into of the prefix
into buffers used before) is printed beside it.

Usage: build/venv/bin/python bench/ttft_bench.py BUILD_DIR [tokens] [tail] [llama|qwen3-next]
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kvtierd
import torch
from targets import target
from transformers import (
    DynamicCache,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)

import kvtier
import kvtier.hf

BLOCK = 256
# Prefills timed to fix the engine's matmul and attention rates, as (cached, tokens): whole
# prompts for the cold prediction, a tail after a cached prefix (kept in memory) for the warm one.
COLD_CALIBRATION = ((0, 2048), (0, 6144))
# Plus the benchmark's uncached tail. A tail's time grows with the cached prefix it attends to;
# two points a factor of 3 apart, the larger within 25% of the benchmark's, keep the
# extrapolation from amplifying the noise of this shared machine.
WARM_CALIBRATION = ((4096, 4096), (12288, 12288))
REPEATS = 3  # Each TTFT is the best of this many runs.
CONFIG = dict(
    hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=8,
    num_key_value_heads=2, head_dim=128, vocab_size=8192, max_position_embeddings=32768,
    rope_theta=500000.0, tie_word_embeddings=False,
)  # fmt: skip
# The same size, two of its four layers Gated DeltaNet (4 key and 8 value heads of 128), dense
# MLPs.
HYBRID = dict(
    CONFIG, linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=128,
    linear_value_head_dim=128, full_attention_interval=2, num_experts=0,
    mlp_only_layers=[0, 1, 2, 3],
)  # fmt: skip
MODELS = {
    "llama": (LlamaForCausalLM, LlamaConfig, CONFIG),
    "qwen3-next": (Qwen3NextForCausalLM, Qwen3NextConfig, HYBRID),
}


def start_kvtierd(
    build: Path, directory: Path, procs: list[subprocess.Popen[bytes]], toml: str
) -> dict[str, str]:
    """Starts a kvtierd (kept in `procs` to be stopped) and returns its ports file."""
    toml = (
        f'data_dir = "{directory}"\n[server]\nnative_listen = "127.0.0.1:0"\nresp_listen = ""\n'
        f'http_listen = ""\nunix_socket = "kvtierd.sock"\n{toml}'
    )
    try:
        proc, ports = kvtierd.start(build, directory, toml)
    except RuntimeError as e:
        sys.exit(str(e))
    procs.append(proc)
    return ports


def ttft(
    model: torch.nn.Module,
    ids: torch.Tensor,
    client: kvtier.Client | None = None,
    ns: kvtier.Namespace | None = None,
) -> tuple[float, int, int]:
    """Seconds to the first token, the token, and how many prompt tokens came from kvtierd."""
    start = time.perf_counter()
    cache, cached = (None, 0)
    if client is not None:
        assert ns is not None
        cache, cached = kvtier.hf.load_prefix(client, ns, ids[0], config=model.config)
    with torch.no_grad():
        if cache is None:
            logits = model(ids, logits_to_keep=1).logits
        else:
            logits = model(ids[:, cached:], cache=cache, logits_to_keep=1).logits
    token = int(logits[0, -1].argmax())
    return time.perf_counter() - start, token, cached


def reload_rates(
    model: torch.nn.Module,
    client: kvtier.Client,
    ns: kvtier.Namespace,
    ids: torch.Tensor,
    prefix: list[int],
    state: bool,
) -> tuple[float, float]:
    """Bytes per second of the stored prefix (with its state) reloaded by the engine
    (kvtier.hf.load_prefix: into fresh memory, then laid out as its cache), and of a raw read of
    the same bytes into buffers used before (the link alone)."""
    keys = kvtier.block_keys(ns, prefix)
    block_bytes = ns.block_bytes
    buf = torch.zeros((len(keys), block_bytes), dtype=torch.uint8)  # Zeroed: no page faults timed.
    bufs = [buf[i] for i in range(len(keys))]
    if state:
        key = kvtier.state_key(keys[-1], kvtier.hf.STATE_GROUP)
        value = client.get(key)
        assert value is not None, "the prefix's state is not stored"
        keys = [*keys, key]
        bufs.append(torch.zeros(len(value), dtype=torch.uint8))
    raw, engine = [], []
    for _ in range(REPEATS):
        start = time.perf_counter()
        sizes = client.get_into(keys, bufs)
        raw.append(time.perf_counter() - start)
        assert sizes == [len(b) for b in bufs], "the prefix is not all stored"
        start = time.perf_counter()
        _, cached = kvtier.hf.load_prefix(client, ns, ids[0], config=model.config)
        engine.append(time.perf_counter() - start)
        assert cached == len(prefix), "the engine did not reload the whole prefix"
    stored = sum(len(b) for b in bufs)
    return stored / min(engine), stored / min(raw)


def crossover(
    build: Path, config: Path, tokens: int, rates: tuple[float, float], gbps: float
) -> dict:
    """`kvtier crossover --json` for an accelerator doing `rates` (matmul, attention) FLOP/s."""
    peak = max(rates)
    out = subprocess.run(
        [str(build / "tools/kvtier"), "crossover", "--model", str(config), "--gpu-tflops",
         f"{peak / 1e12:.6g}", "--mfu", f"{rates[0] / peak:.6g}", "--attention-mfu",
         f"{rates[1] / peak:.6g}", "--link-gbps", f"{gbps:.6g}", "--link-latency-us", "0",
         "--tokens", str(tokens), "--json"],
        capture_output=True, text=True, check=True)  # fmt: skip
    result: dict = json.loads(out.stdout)
    return result


def measure_rates(
    build: Path,
    config: Path,
    model: torch.nn.Module,
    ids: torch.Tensor,
    shapes: tuple[tuple[int, int], ...],
) -> tuple[float, float]:
    """Matmul and attention FLOP/s of this engine from the prefill times of two (cached, tokens)
    shapes, each dense FLOPs / matmul rate + attention FLOPs / attention rate (FLOPs as
    `kvtier crossover` counts them)."""

    def flops(n: int) -> tuple[float, float]:
        j = (
            crossover(build, config, n, (1.0, 1.0), 1.0)
            if n
            else {"dense_flops": 0, "attention_flops": 0}
        )
        return j["dense_flops"], j["attention_flops"]

    rows = []
    for cached, tokens in shapes:
        prefix = None
        if cached:
            with torch.no_grad():
                prefix = model(ids[:, :cached], use_cache=True).past_key_values
        times = []
        for _ in range(REPEATS):
            cache = copy.deepcopy(prefix)
            start = time.perf_counter()
            with torch.no_grad():
                model(ids[:, cached:tokens], cache=cache, logits_to_keep=1)
            times.append(time.perf_counter() - start)
        (d1, a1), (d0, a0) = flops(tokens), flops(cached)
        rows.append((d1 - d0, a1 - a0, min(times)))
    (d1, a1, t1), (d2, a2, t2) = rows
    det = d1 * a2 - d2 * a1
    per_dense, per_attention = (t1 * a2 - t2 * a1) / det, (d1 * t2 - d2 * t1) / det
    if per_dense <= 0 or per_attention <= 0:
        sys.exit(f"calibration prefills too noisy to separate the two rates: {rows}")
    return 1 / per_dense, 1 / per_attention


def predict(
    build: Path, config: Path, tokens: int, cached: int, rates: tuple[float, float], gbps: float
) -> tuple[float, float]:
    """Predicted cold TTFT, and warm TTFT with `cached` tokens reloaded: reload(cached) +
    prefill of the rest, which is recompute(tokens) - recompute(cached)."""
    full = crossover(build, config, tokens, rates, gbps)
    prefix = crossover(build, config, cached, rates, gbps)
    return full["recompute_seconds"], prefix["reload_seconds"] + full["recompute_seconds"] - prefix[
        "recompute_seconds"
    ]


RESTARTED = """
import sys, json, time, torch, kvtier, kvtier.hf
from transformers import AutoModelForCausalLM
sys.path.insert(0, {bench!r})
from ttft_bench import REPEATS, ttft
model = AutoModelForCausalLM.from_pretrained({model_dir!r}, dtype=torch.bfloat16).eval()
ids = torch.load({ids!r})
client = kvtier.Client({url!r})
ns = kvtier.hf.namespace_for(model, "ttft-bench@seed0", tokens_per_block={block})
ttft(model, ids[:, :512])
print(json.dumps(min(ttft(model, ids, client, ns) for _ in range(REPEATS))))
"""


def main() -> None:
    build = Path(sys.argv[1]).resolve()
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 16384
    tail = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    arch = sys.argv[4] if len(sys.argv) > 4 else "llama"
    if arch not in MODELS:
        sys.exit(f"unknown model {arch!r}: {', '.join(MODELS)}")
    model_class, config_class, shape = MODELS[arch]
    torch.manual_seed(0)
    model = model_class(config_class(**shape)).to(torch.bfloat16).eval()
    ns = kvtier.hf.namespace_for(model, "ttft-bench@seed0", tokens_per_block=BLOCK)
    hybrid = kvtier.hf.cache_plan(DynamicCache(config=model.config)).needs_state

    def resumable(c: kvtier.Client, prefix: list[int]) -> int:
        """Blocks of the prefix a warm run can resume from (with the state, when hybrid)."""
        keys = kvtier.block_keys(ns, prefix)
        if hybrid:
            return c.lookup_resume(keys, [kvtier.StateGroup(kvtier.hf.STATE_GROUP)]).resume_blocks
        return c.lookup_prefix(keys).num_blocks

    ids = torch.randint(0, CONFIG["vocab_size"], (1, tokens))
    kv_mib = (tokens // BLOCK) * ns.block_bytes / 2**20
    dram_mib = int(kv_mib * 2 + 256)
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        model.save_pretrained(work / "model")
        torch.save(ids, work / "ids.pt")
        config = work / "model" / "config.json"
        try:
            ttft(model, ids[:, :512])  # Warm-up: first-call allocations.
            stored = (tokens - tail) // BLOCK * BLOCK
            cold_rates = measure_rates(build, config, model, ids, COLD_CALIBRATION)
            warm_rates = measure_rates(
                build,
                config,
                model,
                ids,
                tuple((c, t + tokens - stored) for c, t in WARM_CALIBRATION),
            )

            cold_seconds, cold_token, _ = min(ttft(model, ids) for _ in range(REPEATS))
            with torch.no_grad():
                cache = model(ids[:, :stored], use_cache=True).past_key_values
            prefix = ids[0, :stored].tolist()

            g2_ports = start_kvtierd(
                build,
                work / "g2",
                procs,
                f'[memory]\ncapacity = "{dram_mib}MiB"\nwarm_restart = false\nprefault = true\n'
                '[disk]\ndir = ""\n',
            )
            g3_ports = start_kvtierd(build, work / "g3", procs,
                f'[memory]\ncapacity = "{max(16, int(kv_mib // 4))}MiB"\nwarm_restart = false\n'
                '[disk]\ndir = "disk"\n'
                '[admission]\nfrequency_gate = false\n'
                '[store]\npromote_on_hit = false\nmax_block_bytes = "8MiB"\n')  # fmt: skip
            shared = work / "g4"
            shared.mkdir()
            g4_toml = (
                f'[memory]\ncapacity = "{dram_mib}MiB"\nwarm_restart = false\n[disk]\ndir = ""\n'
                f'[shared]\nlocation = "{shared}"\nwrite_policy = "on_put"\n'
                "promote_on_hit = false\n"
            )
            a_ports = start_kvtierd(build, work / "node_a", procs, g4_toml + 'node_id = "a"\n')
            b_ports = start_kvtierd(build, work / "node_b", procs, g4_toml + 'node_id = "b"\n')
            url = {
                name: "unix://" + p["unix_socket"]
                for name, p in (("g2", g2_ports), ("g3", g3_ports), ("a", a_ports), ("b", b_ports))
            }
            for name in ("g2", "g3", "a"):
                with kvtier.Client(url[name]) as c:
                    kvtier.hf.store_prefix(c, ns, prefix, cache)
            # G3: push the prefix out of the small DRAM tier with as much other data.
            with kvtier.Client(url["g3"]) as c:
                filler = torch.zeros(ns.block_bytes, dtype=torch.uint8)
                other = kvtier.block_keys(
                    ns, [1] * (int(kv_mib // 2 + 32) * 2**20 // ns.block_bytes + 1) * BLOCK
                )
                for key in other:
                    c.put(key, filler)
                tiers = c.lookup_prefix(kvtier.block_keys(ns, prefix)).tiers
                assert set(tiers) == {kvtier.Tier.G3}, f"prefix not all in G3: {tiers}"
            # G4: node A uploaded on put; wait for every object, then read through node B.
            deadline = time.monotonic() + 120
            with kvtier.Client(url["b"]) as c:
                while resumable(c, prefix) < len(prefix) // BLOCK:
                    assert time.monotonic() < deadline, "G4 never held the whole prefix"
                    time.sleep(0.05)

            rows: list[tuple[str, float, int, tuple[float, float] | None]] = [
                ("cold (full prefill)", cold_seconds, 0, None)
            ]
            for name, label in (
                ("g2", "warm, G2"),
                ("g3", "warm, G3"),
                ("b", "warm, G4 via a 2nd kvtierd"),
            ):
                with kvtier.Client(url[name], connections=2) as c:
                    rate = reload_rates(model, c, ns, ids, prefix, hybrid)
                    seconds, token, cached = min(ttft(model, ids, c, ns) for _ in range(REPEATS))
                    assert token == cold_token, f"{label}: first token {token}, cold {cold_token}"
                    rows.append((label, seconds, cached, rate))
                if name == "g2":
                    out = subprocess.run([sys.executable, "-c", RESTARTED.format(
                        bench=str(Path(__file__).parent), model_dir=str(work / "model"),
                        ids=str(work / "ids.pt"), url=url["g2"], block=BLOCK)],
                        capture_output=True, text=True, check=True)  # fmt: skip
                    seconds, token, cached = json.loads(out.stdout.strip().splitlines()[-1])
                    assert token == cold_token, "restarted engine: another first token"
                    rows.append(("warm, G2, engine restarted", seconds, cached, rate))
        finally:
            for p in procs:
                p.terminate()
                p.wait()

        print(
            f"TTFT (best of {REPEATS}), {tokens}-token prompt, {stored} reloaded when warm; "
            f"{sum(p.numel() for p in model.parameters()) / 1e6:.0f}M-parameter {arch} model, "
            f"bf16, {torch.get_num_threads()} threads; KV {kv_mib:.0f} MiB"
        )
        warm_prefixes = " and ".join(str(c) for c, _ in WARM_CALIBRATION)
        for label, rates in (
            (f"prompts of {' and '.join(str(t) for _, t in COLD_CALIBRATION)} tokens", cold_rates),
            (f"{tokens - stored}-token tails after {warm_prefixes} cached", warm_rates),
        ):
            print(
                f"engine rates measured on {label}: matmuls {rates[0] / 1e9:.0f} GFLOP/s, "
                f"attention {rates[1] / 1e9:.0f} GFLOP/s"
            )
        print()
        print(
            f"{'':30} {'reloaded':>9} {'engine GB/s':>12} {'link GB/s':>10} {'TTFT s':>8} "
            f"{'cold/this':>10} {'predicted s':>12} {'pred/meas':>10}"
        )
        errors = []
        speedups = []
        for label, seconds, cached, rate in rows:
            if rate is None:
                predicted = predict(build, config, tokens, stored, cold_rates, 1.0)[0]
                engine_s, link_s = "-", "-"
            else:
                predicted = predict(build, config, tokens, cached, warm_rates, rate[0] / 1e9)[1]
                engine_s, link_s = f"{rate[0] / 1e9:.2f}", f"{rate[1] / 1e9:.2f}"
                speedups.append((label.strip(), cold_seconds / seconds))
            errors.append(abs(predicted / seconds - 1))
            print(
                f"{label:30} {cached:9} {engine_s:>12} {link_s:>10} {seconds:8.3f} "
                f"{cold_seconds / seconds:9.1f}x "
                f"{predicted:12.3f} {predicted / seconds:10.2f}"
            )
        print()
        for label, speedup in speedups:
            target(f"TTFT cold / warm ({label})", speedup, ">=", 10)
        target("TTFT prediction error, worst row", max(errors), "<=", 0.25, unit="")


if __name__ == "__main__":
    main()
