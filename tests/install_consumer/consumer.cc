// Puts a block into the kvtierd at argv[1] (an endpoint), reads it back, and says so:
// the C++ API of an installed kvtier, linked through its CMake package.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kvtier/c.h"
#include "kvtier/client.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  kvtier::ClientOptions options;
  options.endpoint = argv[1];
  kvtier::Result<std::unique_ptr<kvtier::Client>> client = kvtier::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  const std::string text = "from a program built against the installed kvtier";
  std::vector<std::byte> value(text.size());
  std::memcpy(value.data(), text.data(), text.size());
  const kvtier::BlockKey key = kvtier::NamedBlockKey("install-test");
  if (kvtier::Status s = (*client)->Put(key, value); !s.ok()) {
    std::fprintf(stderr, "put: %s\n", s.ToString().c_str());
    return 1;
  }
  kvtier::Result<std::vector<std::byte>> back = (*client)->Get(key);
  if (!back.ok() || *back != value) {
    std::fprintf(stderr, "get: %s\n", back.ok() ? "other bytes" : back.status().ToString().c_str());
    return 1;
  }
  std::printf("C++ client %s: put and get OK\n", kvtier_version());
  return 0;
}
