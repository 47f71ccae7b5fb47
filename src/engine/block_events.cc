#include "kvtier/events.h"

namespace kvtier {

const char* BlockMediumName(BlockMedium medium) {
  switch (medium) {
    case BlockMedium::kCpu: return "CPU";
    case BlockMedium::kDisk: return "DISK";
    case BlockMedium::kExternal: return "EXTERNAL";
  }
  return "UNKNOWN";
}

}  // namespace kvtier
