#pragma once

// Byte counts as people read them, for messages and progress lines of every program:
// "4 MiB" when exact, else one decimal of the largest binary unit not above the count
// ("1.5 GiB"), "900 B" below a KiB. (tools/internal/cli.h ParseSize reads these forms back.)
//
// Thread safety: pure function.

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace gfrep::transfer {

inline std::string HumanBytes(std::uint64_t n) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (n < 1024) return fmt::format("{} B", n);
  int u = 0;
  std::uint64_t unit = 1024;
  while (u < 4 && n / unit >= 1024) {
    unit *= 1024;
    ++u;
  }
  if (n % unit == 0) return fmt::format("{} {}", n / unit, kUnits[u]);
  double v = static_cast<double>(n) / static_cast<double>(unit);
  if (v >= 1023.95 && u < 4) {  // would print as "1024.0": the next unit's "1.0"
    v /= 1024;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, kUnits[u]);
}

}  // namespace gfrep::transfer
