#include "tools/internal/cli.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

#include <fmt/format.h>

#include "absl/strings/numbers.h"

namespace gfrep::tools {
namespace {

// Parses "28.5M": a number, an optional k/m/g/t multiplier of `base`, and optionally one
// of the unit words listed in `units` ("bit", "ib", ...), which carry no scale.
absl::StatusOr<std::uint64_t> ParseScaled(std::string_view what, std::string_view text,
                                          double base, std::string_view units) {
  // Debian's Abseil has its own absl::string_view (not an alias of std::string_view),
  // so this file builds messages with fmt and trims by hand.
  std::string t(text);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.erase(0, 1);
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view v = t;
  // Remove unit words ("bps", "bit", "ib", "b") once, longest first.
  for (std::string_view unit : {"bit/s", "bps", "bit", "ib", "b"}) {
    if (units.find(unit) != std::string_view::npos && v.ends_with(unit)) {
      v.remove_suffix(unit.size());
      break;
    }
  }
  double mult = 1;
  if (!v.empty() && std::isalpha(static_cast<unsigned char>(v.back()))) {
    switch (v.back()) {
      case 'k': mult = base; break;
      case 'm': mult = base * base; break;
      case 'g': mult = base * base * base; break;
      case 't': mult = base * base * base * base; break;
      default:
        return absl::InvalidArgumentError(fmt::format("bad {} '{}': unknown unit", what, text));
    }
    v.remove_suffix(1);
  }
  double number = 0;
  if (v.empty() || !absl::SimpleAtod(absl::string_view(v.data(), v.size()), &number) || !std::isfinite(number) || number < 0) {
    return absl::InvalidArgumentError(
        fmt::format("bad {} '{}': expected a non-negative number with an optional K/M/G/T suffix",
                    what, text));
  }
  double value = number * mult;
  if (value >= static_cast<double>(std::numeric_limits<std::uint64_t>::max())) {
    return absl::InvalidArgumentError(fmt::format("bad {} '{}': too large", what, text));
  }
  // Below 2^64 but possibly above 2^63: llround (a long long) would overflow.
  return static_cast<std::uint64_t>(std::round(value));
}

}  // namespace

std::string_view Version() { return GFREP_VERSION; }

void AddCommonFlags(CLI::App& app, CommonFlags& flags) {
  app.set_version_flag("--version", std::string(Version()));
  app.add_option("--log-level", flags.log_level, "Log level: trace, debug, info, warn, error, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
}

std::shared_ptr<spdlog::logger> MakeLogger(const std::string& name, const CommonFlags& flags) {
  auto logger = spdlog::stderr_color_mt(name);
  logger->set_level(spdlog::level::from_str(flags.log_level));
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %n: %v");
  spdlog::set_default_logger(logger);
  return logger;
}

absl::StatusOr<std::uint64_t> ParseSize(std::string_view text) {
  return ParseScaled("size", text, 1024.0, "ib b");
}

absl::StatusOr<std::uint64_t> ParseRate(std::string_view text) {
  return ParseScaled("rate", text, 1000.0, "bit/s bps bit b");
}

int Fail(std::string_view program, std::string_view message, int code) {
  std::fprintf(stderr, "%.*s: %.*s\n", static_cast<int>(program.size()), program.data(),
               static_cast<int>(message.size()), message.data());
  return code;
}

absl::Status RaiseOpenFileLimit(std::uint64_t want, spdlog::logger& log) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return absl::InternalError("getrlimit(RLIMIT_NOFILE) failed");
  if (rl.rlim_cur >= want) return absl::OkStatus();
  const rlim_t was = rl.rlim_cur;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? static_cast<rlim_t>(want) : std::min<rlim_t>(want, rl.rlim_max);
  if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) return absl::InternalError("setrlimit(RLIMIT_NOFILE) failed");
  log.info("open files limit {} -> {}", was, rl.rlim_cur);
  if (rl.rlim_cur < want) {
    return absl::ResourceExhaustedError(
        fmt::format("open files limited to {} (the hard limit), below the {} wanted", rl.rlim_cur, want));
  }
  return absl::OkStatus();
}

}  // namespace gfrep::tools
