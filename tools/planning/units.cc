#include "tools/planning/units.h"

#include <cctype>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace kvtier::planning {

Result<uint64_t> ParseBytes(std::string_view text) {
  const std::string s(text);
  const char* begin = s.c_str();
  char* end = nullptr;
  const double number = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(number)) {
    return Status::InvalidArgument("malformed size '" + s + "'");
  }
  if (number < 0) return Status::InvalidArgument("size must not be negative: '" + s + "'");
  std::string unit;
  for (const char* p = end; *p != '\0'; ++p) {
    if (!std::isspace(static_cast<unsigned char>(*p))) {
      unit += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
    }
  }
  double scale = 1;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k" || unit == "kib") {
    scale = 1024.0;
  } else if (unit == "m" || unit == "mib") {
    scale = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gib") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "t" || unit == "tib") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else if (unit == "p" || unit == "pib") {
    scale = 1024.0 * 1024 * 1024 * 1024 * 1024;
  } else if (unit == "kb") {
    scale = 1e3;
  } else if (unit == "mb") {
    scale = 1e6;
  } else if (unit == "gb") {
    scale = 1e9;
  } else if (unit == "tb") {
    scale = 1e12;
  } else if (unit == "pb") {
    scale = 1e15;
  } else {
    return Status::InvalidArgument("unknown size unit in '" + s +
                                   "'; use B, KiB, MiB, GiB, TiB, PiB, KB, MB, GB, TB or PB");
  }
  const double bytes = number * scale;
  if (bytes >= 1.8e19) return Status::InvalidArgument("size too large: '" + s + "'");
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string Format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  va_end(args);
  return out;
}

std::string FormatBytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  if (unit == 0) return Format("%.0f B", bytes);
  return Format("%.2f %s", bytes, kUnits[unit]);
}

std::string FormatSeconds(double seconds) {
  const double a = std::fabs(seconds);
  if (a < 1e-3) return Format("%.1f us", seconds * 1e6);
  if (a < 1) return Format("%.2f ms", seconds * 1e3);
  if (a < 120) return Format("%.2f s", seconds);
  if (a < 7200) return Format("%.1f min", seconds / 60);
  return Format("%.2f h", seconds / 3600);
}

}  // namespace kvtier::planning
