#include "src/model/model_files.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

namespace kvtier::model {

Result<std::vector<std::byte>> ReadFileBytes(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) {
    return Status::NotFound("cannot open " + path + ": " + std::strerror(errno));
  }
  std::vector<std::byte> bytes;
  std::byte chunk[1 << 16];
  size_t got = 0;
  while ((got = std::fread(chunk, 1, sizeof(chunk), file.get())) > 0) {
    bytes.insert(bytes.end(), chunk, chunk + got);
  }
  if (std::ferror(file.get())) {
    return Status::DataLoss("read error on " + path);
  }
  return bytes;
}

std::string FindModelDir(const std::string& explicit_dir, const std::string& fallback) {
  std::string dir = explicit_dir;
  if (dir.empty()) {
    const char* env = std::getenv(kModelDirEnv);
    dir = (env != nullptr && env[0] != '\0') ? std::string(env) : fallback;
  }
  std::error_code ec;
  const std::filesystem::path base(dir);
  if (dir.empty() || !std::filesystem::is_regular_file(base / kCheckpointFile, ec) ||
      !std::filesystem::is_regular_file(base / kTokenizerFile, ec)) {
    return "";
  }
  return dir;
}

}  // namespace kvtier::model
