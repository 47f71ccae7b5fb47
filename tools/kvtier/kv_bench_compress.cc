// kvtier kv bench-compress: the KV codec against plain zstd -1, side by side in one run, on
// real KV of the reference model in every dtype, on one core.
//
// Several prompts each fill the model's 512-position cache; their K and V are encoded per
// layer (fp8 with per-layer scales) and cut into blocks of --tokens-per-block tokens laid
// out [layer][K|V][token][kv_head][head_dim], the shape of an engine's KV block. Every block
// is compressed and decompressed with a KvCodec and with libzstd level 1 on the raw bytes;
// the decoded bytes are checked. Beside each ratio, the codecs the KvCodec chose per block.
// Rates are raw (uncompressed) bytes per second, 1 MB = 1e6 B, the median of --trials trials
// of at least --min-seconds each.

#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/model/kv_capture.h"
#include "src/services/compression/kv_codec.h"
#include "tools/kvtier/kv_commands.h"

namespace kvtier::cli {
namespace {

struct BenchCompressOptions {
  std::string model_dir;
  size_t tokens_per_block = 2048;
  int trials = 5;
  double min_seconds = 0.2;
  int zstd_level = compression::KvCodecOptions{}.zstd_level;
  size_t block_kib = compression::KvCodecOptions{}.block_bytes / 1024;
  bool literals_only = !compression::KvCodecOptions{}.match_search;
  bool no_whole_block = !compression::KvCodecOptions{}.whole_block_zstd;
};

// Prompts whose greedy continuations give distinct KV sequences (no block repeats another).
constexpr const char* kPrompts[] = {
    "Once upon a time",     "Lily and Ben went to the park", "One day, a little dog",
    "The sun was shining",  "Tom had a red ball",           "There was a big tree",
    "Sara wanted to bake",  "In a small house near the sea",
};

using Clock = std::chrono::steady_clock;

// Median over trials of bytes per second of `op`, which processes `bytes` per call.
double MeasureMBps(int trials, double min_seconds, size_t bytes, const std::function<bool()>& op,
                   bool* ok) {
  std::vector<double> rates;
  for (int t = 0; t < trials; ++t) {
    size_t done = 0;
    const Clock::time_point start = Clock::now();
    double elapsed = 0;
    do {
      *ok = *ok && op();
      done += bytes;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < min_seconds);
    rates.push_back(static_cast<double>(done) / elapsed / 1e6);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

struct Row {
  double ratio = 0, compress = 0, decompress = 0;
};

// How many blocks each codec stored, as "ranks 2 zstd 1" (codecs 2 and 3).
std::string CodecMix(const std::vector<std::vector<std::byte>>& packed,
                     const std::vector<size_t>& sizes) {
  constexpr const char* kNames[] = {"stored", "planes", "ranks", "zstd"};
  size_t count[std::size(kNames)] = {};
  for (size_t b = 0; b < packed.size(); ++b) {
    Result<compression::KvPayloadInfo> info =
        compression::KvCodec::Inspect(std::span(packed[b]).first(sizes[b]));
    if (info.ok()) count[static_cast<size_t>(info->codec)]++;
  }
  std::string mix;
  for (size_t c = 0; c < std::size(kNames); ++c) {
    if (count[c] == 0) continue;
    if (!mix.empty()) mix += ' ';
    mix += kNames[c] + std::string(" ") + std::to_string(count[c]);
  }
  return mix;
}

int RunBenchCompress(const BenchCompressOptions& opts) {
  const std::string dir = ResolveModelDir(opts.model_dir);
  if (dir.empty()) return 2;
  std::vector<model::CapturedKv> sequences;
  for (const char* prompt : kPrompts) {
    Result<model::CapturedKv> kv = model::CaptureKv(dir, prompt, 512);
    if (!kv.ok()) {
      std::fprintf(stderr, "bench-compress: %s\n", kv.status().ToString().c_str());
      return 1;
    }
    sequences.push_back(std::move(*kv));
  }
  const model::Llama2cConfig& cfg = sequences[0].config;
  const size_t seq_positions = sequences[0].positions;
  const size_t total_tokens = sequences.size() * seq_positions;
  const size_t tokens = opts.tokens_per_block;
  if (tokens == 0 || tokens > total_tokens) {
    std::fprintf(stderr, "bench-compress: --tokens-per-block must be in [1, %zu]\n", total_tokens);
    return 2;
  }
  const size_t n_blocks = total_tokens / tokens;
  std::printf("real KV: %zu sequences x %zu positions of %s (%d layers x %d kv heads x %d dims,"
              " K and V), blocks of %zu tokens, %zu blocks per dtype, one core\n",
              sequences.size(), seq_positions, "stories260K", cfg.n_layers, cfg.n_kv_heads,
              cfg.head_dim(), tokens, n_blocks);
  std::printf("kvtier codec: planes (exponent ranks or byte planes) + zstd level %d, %s, "
              "%zu KiB entropy blocks%s; baseline: zstd -1 (libzstd %s) on the raw bytes\n"
              "codec mix: blocks stored as ranks (codec 2), planes (codec 1), zstd (codec 3, "
              "whole block) or stored (codec 0)\n\n",
              opts.zstd_level, opts.literals_only ? "literals only" : "literals or match search",
              opts.block_kib, opts.no_whole_block ? "" : ", or whole-block zstd where smaller",
              ZSTD_versionString());
  std::printf("%-9s %9s | %7s %10s %10s %-16s | %7s %10s %10s | %10s\n", "dtype", "block KiB",
              "ratio", "comp MB/s", "dec MB/s", "codec mix", "zstd-1", "comp MB/s", "dec MB/s",
              "memcpy MB/s");

  compression::KvCodecOptions codec_options;
  codec_options.zstd_level = opts.zstd_level;
  codec_options.block_bytes = opts.block_kib * 1024;
  codec_options.match_search = !opts.literals_only;
  codec_options.whole_block_zstd = !opts.no_whole_block;
  compression::KvCodec codec(codec_options);
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), &ZSTD_freeCCtx);
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), &ZSTD_freeDCtx);
  bool all_ok = true;
  Row bf16, fp8, worst;
  bool never_below_zstd = true;
  worst.compress = worst.decompress = 1e30;

  for (KvDtype dtype : kKvDumpDtypes) {
    const size_t width = KvDtypeBytes(dtype);
    const size_t row = static_cast<size_t>(cfg.kv_dim()) * width;
    // Encoded K and V of every sequence, [layer][pos][kv_dim] each.
    std::vector<std::vector<std::byte>> enc_k(sequences.size()), enc_v(sequences.size());
    for (size_t s = 0; s < sequences.size(); ++s) {
      std::vector<float> scales;
      Status st = EncodeTensorByLayer(dtype, sequences[s].k, cfg.n_layers, &enc_k[s], &scales);
      if (st.ok()) st = EncodeTensorByLayer(dtype, sequences[s].v, cfg.n_layers, &enc_v[s], &scales);
      if (!st.ok()) {
        std::fprintf(stderr, "bench-compress: %s\n", st.ToString().c_str());
        return 1;
      }
    }
    const size_t block_bytes = 2 * static_cast<size_t>(cfg.n_layers) * tokens * row;
    std::vector<std::vector<std::byte>> blocks(n_blocks, std::vector<std::byte>(block_bytes));
    for (size_t b = 0; b < n_blocks; ++b) {
      std::byte* out = blocks[b].data();
      for (int l = 0; l < cfg.n_layers; ++l) {
        for (const auto* enc : {&enc_k, &enc_v}) {
          for (size_t t = 0; t < tokens; ++t) {
            const size_t g = b * tokens + t, s = g / seq_positions, p = g % seq_positions;
            std::memcpy(out, (*enc)[s].data() + (l * seq_positions + p) * row, row);
            out += row;
          }
        }
      }
    }
    const size_t corpus = n_blocks * block_bytes;
    const size_t cap = std::max(compression::KvCodec::MaxCompressedSize(block_bytes),
                                ZSTD_compressBound(block_bytes));
    std::vector<std::vector<std::byte>> packed(n_blocks, std::vector<std::byte>(cap));
    std::vector<size_t> packed_size(n_blocks), zstd_size(n_blocks);
    std::vector<std::vector<std::byte>> zpacked = packed;
    std::vector<std::byte> back(block_bytes);

    Row codec_row, zstd_row;
    codec_row.compress = MeasureMBps(opts.trials, opts.min_seconds, corpus, [&] {
      for (size_t b = 0; b < n_blocks; ++b) {
        Result<size_t> n = codec.Compress(dtype, blocks[b], std::span(packed[b]));
        if (!n.ok()) return false;
        packed_size[b] = *n;
      }
      return true;
    }, &all_ok);
    codec_row.decompress = MeasureMBps(opts.trials, opts.min_seconds, corpus, [&] {
      for (size_t b = 0; b < n_blocks; ++b) {
        if (!codec.Decompress(std::span(packed[b]).first(packed_size[b]), std::span(back)).ok()) {
          return false;
        }
      }
      return true;
    }, &all_ok);
    zstd_row.compress = MeasureMBps(opts.trials, opts.min_seconds, corpus, [&] {
      for (size_t b = 0; b < n_blocks; ++b) {
        zstd_size[b] = ZSTD_compressCCtx(cctx.get(), zpacked[b].data(), cap, blocks[b].data(),
                                         block_bytes, 1);
        if (ZSTD_isError(zstd_size[b])) return false;
      }
      return true;
    }, &all_ok);
    zstd_row.decompress = MeasureMBps(opts.trials, opts.min_seconds, corpus, [&] {
      for (size_t b = 0; b < n_blocks; ++b) {
        if (ZSTD_decompressDCtx(dctx.get(), back.data(), block_bytes, zpacked[b].data(),
                                zstd_size[b]) != block_bytes) {
          return false;
        }
      }
      return true;
    }, &all_ok);
    const double memcpy_rate = MeasureMBps(opts.trials, opts.min_seconds, corpus, [&] {
      for (size_t b = 0; b < n_blocks; ++b) std::memcpy(back.data(), blocks[b].data(), block_bytes);
      return back[0] == blocks[n_blocks - 1][0];
    }, &all_ok);
    // Exactness of both decoders on every block.
    size_t packed_total = 0, zstd_total = 0;
    for (size_t b = 0; b < n_blocks; ++b) {
      packed_total += packed_size[b];
      zstd_total += zstd_size[b];
      all_ok = all_ok &&
               codec.Decompress(std::span(packed[b]).first(packed_size[b]), std::span(back)).ok() &&
               back == blocks[b];
    }
    codec_row.ratio = static_cast<double>(corpus) / static_cast<double>(packed_total);
    zstd_row.ratio = static_cast<double>(corpus) / static_cast<double>(zstd_total);
    std::printf("%-9s %9zu | %6.3f:1 %10.0f %10.0f %-16s | %6.3f:1 %10.0f %10.0f | %10.0f\n",
                KvDtypeName(dtype), block_bytes / 1024, codec_row.ratio, codec_row.compress,
                codec_row.decompress, CodecMix(packed, packed_size).c_str(), zstd_row.ratio,
                zstd_row.compress, zstd_row.decompress, memcpy_rate);
    for (size_t b = 0; b < n_blocks; ++b) {
      never_below_zstd = never_below_zstd && packed_size[b] <= zstd_size[b];
    }
    if (dtype == KvDtype::kBf16) bf16 = codec_row;
    if (dtype == KvDtype::kFp8E4M3) fp8 = codec_row;
    worst.compress = std::min(worst.compress, codec_row.compress);
    worst.decompress = std::min(worst.decompress, codec_row.decompress);
  }
  if (!all_ok) {
    std::fprintf(stderr, "bench-compress: a codec failed or decoded different bytes\n");
    return 1;
  }
  auto verdict = [](bool met) { return met ? "met" : "NOT met"; };
  std::printf("\ntargets (issue 5):\n");
  std::printf("  bf16 ratio >= 1.45:1            %6.3f:1   %s\n", bf16.ratio,
              verdict(bf16.ratio >= 1.45));
  std::printf("  fp8 ratio >= 1.15:1             %6.3f:1   %s\n", fp8.ratio,
              verdict(fp8.ratio >= 1.15));
  std::printf("  every block <= zstd -1's size    every dtype         %s\n",
              verdict(never_below_zstd));
  std::printf("  decompression >= 2000 MB/s/core  slowest dtype %6.0f   %s\n", worst.decompress,
              verdict(worst.decompress >= 2000));
  std::printf("  compression >= 500 MB/s/core     slowest dtype %6.0f   %s\n", worst.compress,
              verdict(worst.compress >= 500));
  return 0;
}

}  // namespace

void AddKvBenchCompressCommand(CLI::App& kv, int* exit_code) {
  auto opts = std::make_shared<BenchCompressOptions>();
  CLI::App* cmd = kv.add_subcommand(
      "bench-compress",
      "Compression ratio and MB/s per core of the KV codec vs zstd -1, on real KV, per dtype.");
  cmd->add_option("--model-dir", opts->model_dir,
                  "Folder with stories260K.bin and tok512.bin (default: $KVTIER_MODEL_DIR)");
  cmd->add_option("--tokens-per-block", opts->tokens_per_block, "Tokens per KV block")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--trials", opts->trials, "Trials per measurement (median reported)")
      ->capture_default_str()->check(CLI::Range(1, 100));
  cmd->add_option("--min-seconds", opts->min_seconds, "Least duration of one trial")
      ->capture_default_str()->check(CLI::Range(0.0, 60.0));
  cmd->add_option("--zstd-level", opts->zstd_level, "zstd level of the codec's planes")
      ->capture_default_str()->check(CLI::Range(-7, 22));
  cmd->add_option("--entropy-block-kib", opts->block_kib, "Entropy table block of the codec")
      ->capture_default_str()->check(CLI::Range(1, 128));
  cmd->add_flag("--literals-only", opts->literals_only,
               "Code the planes as literals only, without zstd's match search");
  cmd->add_flag("--no-whole-block", opts->no_whole_block,
               "Never store a block as one whole-block zstd frame (codec 3)");
  cmd->callback([opts, exit_code] { *exit_code = RunBenchCompress(*opts); });
}

}  // namespace kvtier::cli
