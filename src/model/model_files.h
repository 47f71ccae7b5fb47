// Finding and reading the reference model's files (llama2.c checkpoint and tokenizer).
//
// Thread-safe: plain functions without shared state.

#ifndef KVTIER_SRC_MODEL_MODEL_FILES_H_
#define KVTIER_SRC_MODEL_MODEL_FILES_H_

#include <cstddef>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::model {

// File names of the reference model inside a model directory.
inline constexpr const char* kCheckpointFile = "stories260K.bin";
inline constexpr const char* kTokenizerFile = "tok512.bin";
// Environment variable naming the model directory.
inline constexpr const char* kModelDirEnv = "KVTIER_MODEL_DIR";

// The whole content of `path`. NotFound when it cannot be opened, DataLoss on a read error.
Result<std::vector<std::byte>> ReadFileBytes(const std::string& path);

// The model directory to use: `explicit_dir` when non-empty, else $KVTIER_MODEL_DIR when set
// and non-empty, else `fallback`. Returns an empty string when the chosen directory lacks
// the checkpoint or the tokenizer.
std::string FindModelDir(const std::string& explicit_dir, const std::string& fallback);

}  // namespace kvtier::model

#endif  // KVTIER_SRC_MODEL_MODEL_FILES_H_
