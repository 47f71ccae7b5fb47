// Parsing and printing of the quantities the planning commands take and show.

#ifndef KVTIER_TOOLS_PLANNING_UNITS_H_
#define KVTIER_TOOLS_PLANNING_UNITS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::planning {

// "123", "64KiB", "1.5GiB", "2TB", "512MB" (binary KiB/MiB/GiB/TiB, decimal KB/MB/GB/TB,
// case-insensitive, optional B). InvalidArgument for negative, empty or malformed sizes.
Result<uint64_t> ParseBytes(std::string_view text);

// "1.50 GiB", "320.0 KiB", "12 B".
std::string FormatBytes(double bytes);
// "850 us", "12.3 ms", "4.56 s", "2.1 h".
std::string FormatSeconds(double seconds);
// printf-style formatting into a std::string.
std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace kvtier::planning

#endif  // KVTIER_TOOLS_PLANNING_UNITS_H_
