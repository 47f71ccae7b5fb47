// kvtier kv dump: runs the reference model on a prompt and writes its real K and V tensors in
// bf16, fp16, fp32 and fp8-e4m3, each as raw little-endian bytes plus a JSON sidecar.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "src/model/kv_capture.h"
#include "src/model/model_files.h"
#include "src/services/compression/dtype_convert.h"
#include "tools/kvtier/commands.h"
#include "tools/kvtier/kv_commands.h"

namespace kvtier::cli {

const char* KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kBf16: return "bf16";
    case KvDtype::kFp16: return "fp16";
    case KvDtype::kFp32: return "fp32";
    case KvDtype::kFp8E4M3: return "fp8_e4m3";
    case KvDtype::kFp8E5M2: return "fp8_e5m2";
  }
  return "unknown";
}

std::string ResolveModelDir(const std::string& flag) {
  const std::string dir = model::FindModelDir(flag, "");
  if (dir.empty()) {
    std::fprintf(stderr,
                 "no model: pass --model-dir or set %s to a folder holding %s and %s\n",
                 model::kModelDirEnv, model::kCheckpointFile, model::kTokenizerFile);
  }
  return dir;
}

Status EncodeTensorByLayer(KvDtype dtype, std::span<const float> values, size_t layers,
                           std::vector<std::byte>* out, std::vector<float>* scales) {
  if (layers == 0 || values.size() % layers != 0) {
    return Status::InvalidArgument("values do not split into equal layers");
  }
  const size_t per_layer = values.size() / layers;
  const size_t width = KvDtypeBytes(dtype);
  out->resize(values.size() * width);
  scales->clear();
  for (size_t l = 0; l < layers; ++l) {
    std::span<const float> layer = values.subspan(l * per_layer, per_layer);
    const float scale =
        dtype == KvDtype::kFp8E4M3 ? compression::Fp8E4M3Scale(layer) : 1.0f;
    scales->push_back(scale);
    KVTIER_RETURN_IF_ERROR(compression::EncodeFromFloat32(
        dtype, layer, scale, std::span(*out).subspan(l * per_layer * width, per_layer * width)));
  }
  return Status::OK();
}

namespace {

struct DumpOptions {
  std::string model_dir;
  std::string prompt = "Once upon a time";
  size_t positions = 256;
  std::string out_dir = "kv_dump";
};

Status WriteFile(const std::filesystem::path& path, const void* data, size_t size) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file) return Status::PermissionDenied("cannot create " + path.string());
  if (size > 0 && std::fwrite(data, 1, size, file.get()) != size) {
    return Status::ResourceExhausted("short write to " + path.string());
  }
  if (std::fclose(file.release()) != 0) {
    return Status::ResourceExhausted("cannot close " + path.string());
  }
  return Status::OK();
}

std::string Sidecar(const char* tensor, KvDtype dtype, const model::CapturedKv& kv,
                    const std::vector<float>& scales, size_t bytes) {
  const model::Llama2cConfig& c = kv.config;
  char buf[256];
  std::string json = "{\n";
  json += std::string("  \"tensor\": \"") + tensor + "\",\n";
  json += std::string("  \"dtype\": \"") + KvDtypeName(dtype) + "\",\n";
  std::snprintf(buf, sizeof(buf), "  \"shape\": [%d, %zu, %d, %d],\n", c.n_layers, kv.positions,
                c.n_kv_heads, c.head_dim());
  json += buf;
  json += "  \"dims\": [\"layer\", \"position\", \"kv_head\", \"head_dim\"],\n";
  json += "  \"byte_order\": \"little\",\n";
  std::snprintf(buf, sizeof(buf), "  \"bytes\": %zu,\n", bytes);
  json += buf;
  json += "  \"scale_granularity\": \"per_layer\",\n";
  json += "  \"scale\": [";
  for (size_t i = 0; i < scales.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%s%.9g", i ? ", " : "", scales[i]);
    json += buf;
  }
  json += "],\n";
  json += std::string("  \"model\": \"") + model::kCheckpointFile + "\",\n";
  json += "  \"tokens\": [";
  for (size_t i = 0; i < kv.tokens.size(); ++i) {
    json += (i ? ", " : "") + std::to_string(kv.tokens[i]);
  }
  json += "]\n}\n";
  return json;
}

int RunDump(const DumpOptions& opts) {
  const std::string dir = ResolveModelDir(opts.model_dir);
  if (dir.empty()) return 2;
  Result<model::CapturedKv> kv = model::CaptureKv(dir, opts.prompt, opts.positions);
  if (!kv.ok()) {
    std::fprintf(stderr, "kv dump: %s\n", kv.status().ToString().c_str());
    return 1;
  }
  const std::filesystem::path out(opts.out_dir);
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) {
    std::fprintf(stderr, "kv dump: cannot create %s: %s\n", opts.out_dir.c_str(),
                 ec.message().c_str());
    return 1;
  }
  std::printf("%zu positions of \"%s\"\n", kv->positions, kv->text.c_str());
  for (KvDtype dtype : kKvDumpDtypes) {
    for (const auto& [name, values] : {std::pair<const char*, const std::vector<float>*>{"k", &kv->k},
                                       {"v", &kv->v}}) {
      std::vector<std::byte> bytes;
      std::vector<float> scales;
      Status s = EncodeTensorByLayer(dtype, *values, kv->config.n_layers, &bytes, &scales);
      const std::string stem = std::string(name) + "." + KvDtypeName(dtype);
      if (s.ok()) s = WriteFile(out / (stem + ".bin"), bytes.data(), bytes.size());
      const std::string json = Sidecar(name, dtype, *kv, scales, bytes.size());
      if (s.ok()) s = WriteFile(out / (stem + ".json"), json.data(), json.size());
      if (!s.ok()) {
        std::fprintf(stderr, "kv dump: %s\n", s.ToString().c_str());
        return 1;
      }
      std::printf("wrote %s.bin (%zu bytes) and %s.json\n", (out / stem).c_str(), bytes.size(),
                  stem.c_str());
    }
  }
  return 0;
}

}  // namespace

void AddKvCommand(CLI::App& app, int* exit_code) {
  CLI::App* kv = app.add_subcommand("kv", "Real KV-cache tensors from the reference model.");
  kv->require_subcommand(1);
  auto opts = std::make_shared<DumpOptions>();
  CLI::App* dump = kv->add_subcommand(
      "dump", "Run the model on a prompt; write K and V in bf16, fp16, fp32 and fp8-e4m3 "
              "(raw bytes + JSON sidecar with dtype, shape and scale).");
  dump->add_option("--model-dir", opts->model_dir,
                   "Folder with stories260K.bin and tok512.bin (default: $KVTIER_MODEL_DIR)");
  dump->add_option("--prompt", opts->prompt, "Prompt; greedy decoding continues it")
      ->capture_default_str();
  dump->add_option("--positions", opts->positions, "Positions of K/V to keep")
      ->capture_default_str()->check(CLI::Range(1, 512));
  dump->add_option("--out", opts->out_dir, "Output folder")->capture_default_str();
  dump->callback([opts, exit_code] { *exit_code = RunDump(*opts); });
  AddKvBenchCompressCommand(*kv, exit_code);
}

}  // namespace kvtier::cli
