#include "src/services/encryption/master_key.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "src/services/encryption/kdf.h"

namespace kvtier::encryption {
namespace {

// Domain separation for everything derived from the master key.
constexpr std::string_view kHkdfSalt = "kvtier key hierarchy v1";
constexpr std::string_view kIdInfo = "kvtier/v1/master-key-id";
constexpr std::string_view kKekInfo = "kvtier/v1/kek";
constexpr std::string_view kMacInfo = "kvtier/v1/keystore-mac";
// A key file is tiny; anything larger is not a key file.
constexpr size_t kMaxKeyFileBytes = 256;

std::span<const uint8_t> AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<MasterKey> MasterKey::FromBytes(std::span<const uint8_t> bytes) {
  if (bytes.size() != kSecretKeyBytes) {
    return Status::InvalidArgument("master key must be 32 bytes");
  }
  bool all_zero = true;
  for (uint8_t b : bytes) all_zero = all_zero && b == 0;
  if (all_zero) return Status::InvalidArgument("master key is all zero");
  MasterKey key;
  key.key_ = SecretKey(bytes.first<kSecretKeyBytes>());
  KVTIER_RETURN_IF_ERROR(HkdfSha256(key.key_.bytes(), AsBytes(kHkdfSalt), AsBytes(kIdInfo),
                                    key.id_));
  return key;
}

Result<MasterKey> MasterKey::FromHex(std::string_view hex) {
  hex = Trim(hex);
  if (hex.size() != 2 * kSecretKeyBytes) {
    return Status::InvalidArgument("master key must be 64 hexadecimal digits");
  }
  SecretKey raw;
  for (size_t i = 0; i < kSecretKeyBytes; ++i) {
    const int hi = HexDigit(hex[2 * i]);
    const int lo = HexDigit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return Status::InvalidArgument("master key must be 64 hexadecimal digits");
    }
    raw.mutable_bytes()[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return FromBytes(raw.bytes());
}

Result<MasterKey> MasterKey::FromKeyFile(std::span<const uint8_t> contents, uint32_t mode) {
  if ((mode & S_IRWXO) != 0) {
    return Status::PermissionDenied(
        "master key file is accessible to other users; chmod o-rwx (0600 recommended)");
  }
  if (contents.size() == kSecretKeyBytes) return FromBytes(contents);
  Result<MasterKey> key =
      FromHex({reinterpret_cast<const char*>(contents.data()), contents.size()});
  if (!key.ok()) {
    return Status::InvalidArgument(
        "master key file must hold 32 raw bytes or 64 hexadecimal digits");
  }
  return key;
}

Result<MasterKey> MasterKey::LoadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string what = "master key file " + path + ": " + std::strerror(err);
    if (err == ENOENT) return Status::NotFound(what);
    if (err == EACCES) return Status::PermissionDenied(what);
    return Status::Unavailable(what);
  }
  struct stat st {};
  std::vector<uint8_t> contents(kMaxKeyFileBytes + 1);
  size_t size = 0;
  Status status;
  if (::fstat(fd, &st) != 0) {
    status = Status::Unavailable("master key file " + path + ": fstat failed");
  } else if (!S_ISREG(st.st_mode)) {
    status = Status::InvalidArgument("master key file " + path + " is not a regular file");
  } else {
    while (size < contents.size()) {
      const ssize_t n = ::read(fd, contents.data() + size, contents.size() - size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = Status::Unavailable("master key file " + path + ": read failed");
        break;
      }
      if (n == 0) break;
      size += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  Result<MasterKey> key = status;
  if (status.ok()) {
    key = FromKeyFile(std::span<const uint8_t>(contents.data(), size),
                      static_cast<uint32_t>(st.st_mode));
  }
  OPENSSL_cleanse(contents.data(), contents.size());
  if (!key.ok()) {
    return Status(key.status().code(),
                  "master key file " + path + ": " + std::string(key.status().message()));
  }
  return key;
}

Result<MasterKey> MasterKey::FromEnvironment(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') {
    return Status::NotFound(std::string("environment variable ") + variable + " is not set");
  }
  Result<MasterKey> key = FromHex(value);
  if (!key.ok()) {
    return Status::InvalidArgument(std::string("environment variable ") + variable +
                                   " must hold 64 hexadecimal digits");
  }
  return key;
}

std::string MasterKey::IdHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (uint8_t b : id_) {
    hex.push_back(kDigits[b >> 4]);
    hex.push_back(kDigits[b & 15]);
  }
  return hex;
}

Status MasterKey::DeriveKek(std::string_view tenant, uint32_t version, SecretKey* kek) const {
  if (tenant.empty() || tenant.size() > 255) {
    return Status::InvalidArgument("tenant name must be 1 to 255 bytes");
  }
  // info = "kvtier/v1/kek" 0x00 u8 tenant_len tenant u32le version: unambiguous, so no two
  // (tenant, version) pairs share a KEK.
  std::vector<uint8_t> info(kKekInfo.begin(), kKekInfo.end());
  info.push_back(0);
  info.push_back(static_cast<uint8_t>(tenant.size()));
  info.insert(info.end(), tenant.begin(), tenant.end());
  for (int i = 0; i < 4; ++i) info.push_back(static_cast<uint8_t>(version >> (8 * i)));
  return HkdfSha256(key_.bytes(), AsBytes(kHkdfSalt), info, kek->mutable_bytes());
}

Status MasterKey::DeriveKeystoreMacKey(SecretKey* mac_key) const {
  return HkdfSha256(key_.bytes(), AsBytes(kHkdfSalt), AsBytes(kMacInfo),
                    mac_key->mutable_bytes());
}

}  // namespace kvtier::encryption
