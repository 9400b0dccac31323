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
  // Set only by AddLogFileFlags (the daemons). Empty: log to stderr (the journal under systemd).
  std::string log_file;
  // Rotation of `log_file`: a file grows to `log_max_mb` MiB, then it is renamed with a number
  // before its extension (gfsited.log -> gfsited.1.log -> gfsited.2.log, spdlog's
  // rotating_file_sink); `log_files` rotated files are kept besides the current one.
  std::uint64_t log_max_mb = 100;
  std::size_t log_files = 5;
};

// Adds --version, --log-level, --config FILE and --print-config to `app` (every program
// has them). --config reads a TOML file whose keys are the long option names without the
// dashes (listen = "127.0.0.1:7400", insecure = true, a subcommand's options under
// "[subcommand]"); options given on the command line override the file's keys. Unknown
// keys, keys of options that take no file value, and lines that are not TOML are parse
// errors naming the file, the line or the key. --print-config prints the settings in force
// (file and flags applied, defaults included) as TOML and exits 0; it needs every required
// option, like a real start.
void AddCommonFlags(CLI::App& app, CommonFlags& flags);

// Adds --log-file PATH, --log-max-mb N and --log-files N (daemons; see CommonFlags).
void AddLogFileFlags(CLI::App& app, CommonFlags& flags);

// A logger named `name` at `flags.log_level`, also made the default: on stderr, or with
// `flags.log_file` set, on that file with size-based rotation (every line flushed). Throws
// spdlog::spdlog_ex if the file cannot be opened; use MakeLoggerOrError to get a status.
std::shared_ptr<spdlog::logger> MakeLogger(const std::string& name, const CommonFlags& flags);

// MakeLogger, but a log file that cannot be opened is kInvalidArgument naming it.
absl::StatusOr<std::shared_ptr<spdlog::logger>> MakeLoggerOrError(const std::string& name,
                                                                  const CommonFlags& flags);

// "4096", "64K", "1.5M", "2G", "1T" (binary multiples, optional trailing "B"/"iB").
// kInvalidArgument on anything else, on negative values and on overflow.
absl::StatusOr<std::uint64_t> ParseSize(std::string_view text);

// Bits per second: "1000", "50M", "28.5M", "1G", "2.5g", optional trailing "bit"/"bps"/"b"
// (decimal multiples, as network rates are). kInvalidArgument on anything else.
absl::StatusOr<std::uint64_t> ParseRate(std::string_view text);

// Prints "<program>: <message>" on stderr. Returns `code` so mains can `return Fail(...)`.
int Fail(std::string_view program, std::string_view message, int code = 1);

// The daemons' --http server limits (replica::web::HttpServerOptions; the caller sets the
// defaults from it).
struct HttpLimitFlags {
  std::size_t max_connections = 0;
  std::size_t max_connections_per_client = 0;
  int fd_reserve = 0;
};

// Adds --http-max-connections, --http-max-connections-per-client and --http-fd-reserve.
void AddHttpLimitFlags(CLI::App& app, HttpLimitFlags& flags);

// Raises the soft RLIMIT_NOFILE to `want` (at most the hard limit) and logs the change.
// kResourceExhausted naming both numbers if the hard limit is lower.
absl::Status RaiseOpenFileLimit(std::uint64_t want, spdlog::logger& log);

}  // namespace gfrep::tools
