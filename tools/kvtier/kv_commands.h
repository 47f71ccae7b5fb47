// The `kvtier kv` commands (dump, bench-compress) and what they share: real KV from the
// reference model, encoded per layer as an engine would store it.

#ifndef KVTIER_TOOLS_KVTIER_KV_COMMANDS_H_
#define KVTIER_TOOLS_KVTIER_KV_COMMANDS_H_

#include <CLI/CLI.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/status.h"

namespace kvtier::cli {

// Registers `bench-compress` under the `kv` command.
void AddKvBenchCompressCommand(CLI::App& kv, int* exit_code);

// The dtypes the kv commands write, and their names ("bf16", "fp16", "fp32", "fp8_e4m3").
inline constexpr KvDtype kKvDumpDtypes[] = {KvDtype::kBf16, KvDtype::kFp16, KvDtype::kFp32,
                                            KvDtype::kFp8E4M3};
const char* KvDtypeName(KvDtype dtype);

// The model directory from --model-dir, else $KVTIER_MODEL_DIR; prints why and returns ""
// when neither holds the model.
std::string ResolveModelDir(const std::string& flag);

// Encodes `values`, `layers` equal layers of one tensor (K or V), as `dtype` into *out.
// fp8 gets one scale per layer (amax / 448, as engines keep k_scale and v_scale per
// attention layer), returned in *scales; other dtypes get scale 1.
Status EncodeTensorByLayer(KvDtype dtype, std::span<const float> values, size_t layers,
                           std::vector<std::byte>* out, std::vector<float>* scales);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_KV_COMMANDS_H_
