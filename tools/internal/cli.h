#pragma once

// Shared plumbing for gfrep's command-line programs: version flag, log setup,
// size/rate flag parsing, and the one-line error convention. Only tools/ uses it;
// libraries take their settings through option structs.

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gfrep::tools {

// The project version, e.g. "0.1.0".
std::string_view Version();

struct CommonFlags {
  // trace, debug, info, warn, error, off.
  std::string log_level = "warn";
};

// Adds --version and --log-level to `app` (every program has them).
void AddCommonFlags(CLI::App& app, CommonFlags& flags);

// A logger writing to stderr at `flags.log_level`, named `name`; also made the default.
std::shared_ptr<spdlog::logger> MakeLogger(const std::string& name, const CommonFlags& flags);

// "4096", "64K", "1.5M", "2G", "1T" (binary multiples, optional trailing "B"/"iB").
// kInvalidArgument on anything else, on negative values and on overflow.
absl::StatusOr<std::uint64_t> ParseSize(std::string_view text);

// Bits per second: "1000", "50M", "28.5M", "1G", "2.5g", optional trailing "bit"/"bps"/"b"
// (decimal multiples, as network rates are). kInvalidArgument on anything else.
absl::StatusOr<std::uint64_t> ParseRate(std::string_view text);

// Prints "<program>: <message>" on stderr. Returns `code` so mains can `return Fail(...)`.
int Fail(std::string_view program, std::string_view message, int code = 1);

// Raises the soft RLIMIT_NOFILE to `want` (at most the hard limit) and logs the change.
// kResourceExhausted naming both numbers if the hard limit is lower.
absl::Status RaiseOpenFileLimit(std::uint64_t want, spdlog::logger& log);

}  // namespace gfrep::tools
