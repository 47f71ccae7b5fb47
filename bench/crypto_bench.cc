// kvtier_crypto_bench: AES-256-GCM throughput per core next to single-core memcpy, one run.
//
//   kvtier_crypto_bench [BLOCK_BYTES [TOTAL_MB]]
//     On one thread, over BLOCK_BYTES buffers (default 2 MiB), processes TOTAL_MB (default
//     1024, MB = 10^6 bytes) per measurement and prints the best of 5 measurements of:
//       memcpy            copy into a second buffer (the ceiling for touching each byte once)
//       gcm_seal          AesGcm::Seal, out of place
//       gcm_open          AesGcm::Open, out of place, tag checked
//       record_seal       RecordCipher::Seal: key lookup, nonce budget, random nonce, AAD
//       record_open       RecordCipher::Open: key lookup, AAD, tag checked
//     as "name MBps ratio_to_memcpy". Keys live in an in-memory keystore; no disk is touched.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "src/env/mem_env.h"
#include "src/services/encryption/aes_gcm.h"
#include "src/services/encryption/key_manager.h"
#include "src/services/encryption/record_cipher.h"

namespace kvtier::encryption {
namespace {

using Clock = std::chrono::steady_clock;

// Keeps the compiler from dropping work whose result is never read.
void Touch(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

// Best MB/s of 5 runs of `op` (which processes `block` bytes) repeated to `total` bytes.
double BestMBps(size_t block, uint64_t total, const std::function<bool()>& op) {
  double best = 0;
  const uint64_t reps = std::max<uint64_t>(1, total / block);
  for (int run = 0; run < 5; ++run) {
    const Clock::time_point start = Clock::now();
    for (uint64_t i = 0; i < reps; ++i) {
      if (!op()) {
        std::fprintf(stderr, "operation failed\n");
        std::exit(1);
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, static_cast<double>(reps * block) / seconds / 1e6);
  }
  return best;
}

int Main(int argc, char** argv) {
  const size_t block = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : size_t{2} << 20;
  const uint64_t total = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1024) * 1000000ULL;
  if (block == 0) {
    std::fprintf(stderr, "usage: kvtier_crypto_bench [BLOCK_BYTES [TOTAL_MB]]\n");
    return 2;
  }
  std::vector<std::byte> plain(block), cipher(block), out(block);
  for (size_t i = 0; i < block; ++i) plain[i] = static_cast<std::byte>((i * 2654435761u) >> 13);

  Result<std::unique_ptr<AesGcm>> gcm = AesGcm::Create();
  std::unique_ptr<Env> env = NewMemEnv(Env::Default());
  Result<MasterKey> master = MasterKey::FromHex(std::string(64, '7'));
  if (!gcm.ok() || !master.ok() || !env->CreateDir("/keys").ok()) return 1;
  Result<std::unique_ptr<KeyManager>> keys = KeyManager::Open(env.get(), "/keys", *master, {});
  if (!keys.ok()) return 1;
  Result<std::unique_ptr<RecordCipher>> records = RecordCipher::Create(keys->get());
  if (!records.ok()) return 1;

  SecretKey key;
  key.mutable_bytes()[0] = 1;
  GcmNonce nonce{};
  GcmTag tag{};
  const BlockKey block_key;
  SealedRecordInfo info;

  std::printf("block_bytes %zu total_MB_per_run %llu\n", block,
              static_cast<unsigned long long>(total / 1000000));
  const double memcpy_mbps = BestMBps(block, total, [&] {
    std::memcpy(out.data(), plain.data(), block);
    Touch(out.data());
    return true;
  });
  const auto report = [&](const char* name, double mbps) {
    std::printf("%-12s %9.0f MBps  %.2fx memcpy\n", name, mbps, mbps / memcpy_mbps);
  };
  report("memcpy", memcpy_mbps);
  report("gcm_seal", BestMBps(block, total, [&] {
           ++nonce[0];  // A fresh nonce per message, as in real use.
           return gcm->get()->Seal(key, nonce, {}, plain, cipher, &tag).ok();
         }));
  report("gcm_open", BestMBps(block, total, [&] {
           return gcm->get()->Open(key, nonce, {}, cipher, tag, out).ok();
         }));
  report("record_seal", BestMBps(block, total, [&] {
           Result<SealedRecordInfo> sealed =
               (*records)->Seal(1, "bench", block_key, plain, cipher);
           if (sealed.ok()) info = *sealed;
           return sealed.ok();
         }));
  report("record_open", BestMBps(block, total, [&] {
           return (*records)->Open(1, "bench", block_key, info, cipher, out).ok();
         }));
  return std::memcmp(out.data(), plain.data(), block) == 0 ? 0 : 1;
}

}  // namespace
}  // namespace kvtier::encryption

int main(int argc, char** argv) { return kvtier::encryption::Main(argc, argv); }
