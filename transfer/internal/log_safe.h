#pragma once

// LogSafe: text that came from the network, fit for one log line. Control characters
// (U+0000..U+001F, U+007F) become \xNN, so a peer cannot end a line and forge the next one
// or send terminal escapes to whoever reads the log. Everything else is kept as is.

#include <cstdio>
#include <string>
#include <string_view>

namespace gfrep::transfer::internal {

inline std::string LogSafe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      char esc[5];
      std::snprintf(esc, sizeof(esc), "\\x%02x", static_cast<unsigned>(u));
      out += esc;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace gfrep::transfer::internal
