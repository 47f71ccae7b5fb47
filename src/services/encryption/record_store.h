// RecordStore: what the cluster key service (cluster_keys.h) needs of the storage every node
// shares: small named records beside the data, and a stable name component per tenant. G4's
// SharedTier provides it (src/tier/shared/shared_tier.h); the service sits below the tiers and
// knows nothing else of them.

#ifndef KVTIER_SRC_SERVICES_ENCRYPTION_RECORD_STORE_H_
#define KVTIER_SRC_SERVICES_ENCRYPTION_RECORD_STORE_H_

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::encryption {

class RecordStore {
 public:
  virtual ~RecordStore() = default;

  // Names are 1 to 200 of [A-Za-z0-9._~-] (else InvalidArgument); bodies are at most
  // kMaxRecordBytes.
  static constexpr size_t kMaxRecordBytes = 64 * 1024;
  // Publishes `body` as `name` unless a record of that name exists: then AlreadyExists, and
  // nothing changes. Of concurrent creators of one name exactly one succeeds, on every node.
  // A store that cannot guarantee it (S3 without conditional writes) says FailedPrecondition.
  virtual Status CreateRecord(std::string_view name, std::span<const std::byte> body) = 0;
  // NotFound when absent.
  virtual Result<std::vector<std::byte>> ReadRecord(std::string_view name) = 0;
  // Names of the records that start with `prefix`, sorted.
  virtual Result<std::vector<std::string>> ListRecords(std::string_view prefix) = 0;
  // OK when absent.
  virtual Status DeleteRecord(std::string_view name) = 0;

  // The component that stands for `tenant` in record names: the same on every node and in
  // every version, valid in a name, and without '.'. InvalidArgument for a name the store
  // cannot hold.
  virtual Result<std::string> TenantComponent(std::string_view tenant) const = 0;
};

}  // namespace kvtier::encryption

#endif  // KVTIER_SRC_SERVICES_ENCRYPTION_RECORD_STORE_H_
