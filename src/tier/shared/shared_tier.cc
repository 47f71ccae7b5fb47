#include "src/tier/shared/shared_tier.h"

#include <string>

namespace kvtier {

Status SharedTierBaseOptions::Sanitize(std::string_view tier) {
  const std::string name(tier);
  if (node_id.empty()) node_id = g4::DefaultNodeId();
  if (!g4::ValidNodeId(node_id)) {
    return Status::InvalidArgument(name + ": node_id must be 1 to 64 of [A-Za-z0-9_-]");
  }
  if (env == nullptr) env = Env::Default();
  if (janitor.lease_us <= 2 * janitor.clock_margin_us) {
    return Status::InvalidArgument(name + ": lease_us must exceed 2 x clock_margin_us");
  }
  return Status::OK();
}

}  // namespace kvtier
