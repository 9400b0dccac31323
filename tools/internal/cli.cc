#include "tools/internal/cli.h"

#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>

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

std::string Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

bool IsNameChars(std::string_view s, std::string_view extra) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && extra.find(c) == std::string_view::npos) return false;
  }
  return true;
}

// Consumes one TOML value (string, number, boolean or a one-line array of them) from the
// front of `v`. Returns an error message, empty when fine.
std::string TakeTomlValue(std::string_view& v) {
  if (v.empty()) return "missing value";
  const char quote = v.front();
  if (quote == '"' || quote == '\'') {
    for (std::size_t i = 1; i < v.size(); ++i) {
      // CLI11's reader neither unescapes nor knows comments from '#' inside quotes.
      if (v[i] == '\\' && quote == '"') return "backslash escapes are not supported (use a 'literal string')";
      if (v[i] == '#') return "'#' inside a value is not supported";
      if (v[i] == quote) {
        v.remove_prefix(i + 1);
        return "";
      }
    }
    return "unterminated string";
  }
  if (quote == '[') {
    v.remove_prefix(1);
    auto skip_space = [&v] {
      while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.remove_prefix(1);
    };
    skip_space();
    if (!v.empty() && v.front() == ']') {
      v.remove_prefix(1);
      return "";
    }
    for (;;) {
      skip_space();
      if (!v.empty() && v.front() == '[') return "nested arrays are not supported";
      if (std::string e = TakeTomlValue(v); !e.empty()) return e;
      skip_space();
      if (v.empty()) return "unterminated array (arrays must be on one line)";
      if (v.front() == ']') {
        v.remove_prefix(1);
        return "";
      }
      if (v.front() != ',') return "expected ',' or ']' in the array";
      v.remove_prefix(1);
    }
  }
  std::size_t end = 0;
  while (end < v.size() && !std::isspace(static_cast<unsigned char>(v[end])) && v[end] != ',' &&
         v[end] != ']' && v[end] != '#') {
    ++end;
  }
  const std::string_view word = v.substr(0, end);
  bool number = !word.empty();
  bool digit = false;
  for (std::size_t i = 0; i < word.size() && number; ++i) {
    const char c = word[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digit = true;
    } else if (!(c == '_' || c == '.' || c == 'e' || c == 'E' ||
                 ((c == '+' || c == '-') && (i == 0 || word[i - 1] == 'e' || word[i - 1] == 'E')))) {
      number = false;
    }
  }
  if (word != "true" && word != "false" && !(number && digit)) {
    return fmt::format("'{}' is not a TOML string, number, boolean or array (quote strings: \"...\")",
                       Trim(v));
  }
  v.remove_prefix(end);
  return "";
}

// Why a line of a config file is not the TOML subset gfrep reads ("" when it is). `section`
// and `seen` carry the current [section] and the keys met so far between lines.
std::string CheckTomlLine(std::string_view raw, std::string& section, std::set<std::string>& seen) {
  const std::string line = Trim(raw);
  if (line.empty() || line.front() == '#') return "";
  if (line.front() == '[') {
    if (line.starts_with("[[")) return "arrays of tables ([[...]]) are not supported";
    const std::size_t close = line.find(']');
    const std::string rest = close == std::string::npos ? "" : Trim(std::string_view(line).substr(close + 1));
    if (close == std::string::npos || !(rest.empty() || rest.front() == '#')) {
      return fmt::format("bad section header '{}'", line);
    }
    section = Trim(std::string_view(line).substr(1, close - 1));
    if (!IsNameChars(section, "_-.")) return fmt::format("bad section name '{}'", section);
    return "";
  }
  const std::size_t eq = line.find('=');
  if (eq == std::string::npos) {
    return fmt::format("expected 'key = value', '[section]' or a '#' comment, got '{}'", line);
  }
  const std::string key = Trim(std::string_view(line).substr(0, eq));
  if (!IsNameChars(key, "_-")) return fmt::format("bad key '{}'", key);
  if (!seen.insert(section + "." + key).second) return fmt::format("key '{}' given twice", key);
  std::string_view value(line);
  value.remove_prefix(eq + 1);
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.front()))) value.remove_prefix(1);
  if (std::string e = TakeTomlValue(value); !e.empty()) return fmt::format("key '{}': {}", key, e);
  const std::string rest = Trim(value);
  if (!rest.empty() && rest.front() != '#') {
    return fmt::format("key '{}': unexpected '{}' after the value", key, rest);
  }
  return "";
}

// CLI11's TOML reader, behind a line-by-line check of the TOML subset (CLI11 alone would
// take a stray word for a flag and an unterminated string for a value).
class StrictToml : public CLI::ConfigTOML {
 public:
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::stringstream checked;
    std::string line, section;
    std::set<std::string> seen;
    for (int number = 1; std::getline(input, line); ++number) {
      if (std::string error = CheckTomlLine(line, section, seen); !error.empty()) {
        throw CLI::ConfigError(fmt::format("line {}: {}", number, error));
      }
      checked << line << '\n';
    }
    return CLI::ConfigTOML::from_config(checked);
  }
};

// CLI11's one-line errors, with the config file named on errors that come from it.
std::string ConfigAwareFailureMessage(const CLI::App* app, const CLI::Error& e) {
  const CLI::Option* config = app->get_config_ptr();
  const std::string file = config != nullptr && config->count() > 0 ? config->as<std::string>() : "";
  if (dynamic_cast<const CLI::FileError*>(&e) != nullptr && !file.empty()) {
    return fmt::format("config file {}\n", e.what());
  }
  if (dynamic_cast<const CLI::ConfigError*>(&e) == nullptr) {
    std::string message = CLI::FailureMessage::simple(app, e);
    // A bad value may come from the file: say where to look.
    if (!file.empty() && message.starts_with("--")) {
      message.insert(message.find('\n'), fmt::format(" (on the command line or in config file {})", file));
    }
    return message;
  }
  std::string message = e.what();
  constexpr std::string_view kExtras = "INI was not able to parse ";
  if (message.starts_with(kExtras)) {
    std::string key = message.substr(kExtras.size());
    message = key.ends_with(".++") ? fmt::format("unknown section [{}]", key.substr(0, key.size() - 3))
                                   : fmt::format("unknown key '{}'", key);
  }
  return fmt::format("config file {}: {}\n", file, message);
}

}  // namespace

std::string_view Version() { return GFREP_VERSION; }

void AddCommonFlags(CLI::App& app, CommonFlags& flags) {
  app.set_version_flag("--version", std::string(Version()))->configurable(false);
  if (CLI::Option* help = app.get_help_ptr(); help != nullptr) help->configurable(false);
  app.add_option("--log-level", flags.log_level, "Log level: trace, debug, info, warn, error, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();
  app.config_formatter(std::make_shared<StrictToml>());
  app.set_config("--config", "",
                 "TOML file of settings: keys are the long options without '--' (name = "
                 "\"text\", count = 4, flag = true); options on the command line override it");
  app.allow_config_extras(false);
  app.failure_message(ConfigAwareFailureMessage);
  auto print = std::make_shared<bool>(false);
  app.add_flag("--print-config", *print,
               "Print the settings in force (config file and options applied) as TOML and exit")
      ->configurable(false);
  // Options added from here on show their defaults in --help and --print-config.
  app.option_defaults()->always_capture_default();
  app.final_callback([&app, print] {
    if (!*print) return;
    // Unset options without a default come out as key="": commented, so that the output
    // read back as a config file sets exactly what is in force.
    // Hidden (test-only) options stay out.
    std::istringstream text(app.config_to_str(/*default_also=*/true, /*write_description=*/true));
    for (std::string line; std::getline(text, line);) {
      const std::size_t eq = line.find('=');
      const CLI::Option* option =
          line.starts_with("#") || eq == std::string::npos ? nullptr : app.get_option_no_throw("--" + line.substr(0, eq));
      if (option != nullptr && option->get_group().empty()) continue;
      if (option != nullptr && option->count() == 0 && line.ends_with("=\"\"")) line = "# " + line;
      std::cout << line << '\n';
    }
    throw CLI::Success();
  });
}

void AddLogFileFlags(CLI::App& app, CommonFlags& flags) {
  app.add_option("--log-file", flags.log_file,
                 "Log to this file instead of stderr (the journal under systemd), rotated by size");
  app.add_option("--log-max-mb", flags.log_max_mb, "With --log-file: MiB a log file grows to before rotation")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--log-files", flags.log_files,
                 "With --log-file: rotated files kept (x.log -> x.1.log newest ... x.N.log oldest)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
}

void AddHttpLimitFlags(CLI::App& app, HttpLimitFlags& flags) {
  app.add_option("--http-max-connections", flags.max_connections,
                 "--http: connections served at once (pages, /metrics, WebSockets); more are closed at once")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--http-max-connections-per-client", flags.max_connections_per_client,
                 "--http: connections served at once from one client address")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--http-fd-reserve", flags.fd_reserve,
                 "--http: new connections are closed at once while fewer than this many file "
                 "descriptors are free (the daemon's own work keeps them)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
}

std::shared_ptr<spdlog::logger> MakeLogger(const std::string& name, const CommonFlags& flags) {
  std::shared_ptr<spdlog::logger> logger;
  if (flags.log_file.empty()) {
    logger = spdlog::stderr_color_mt(name);
  } else {
    logger = spdlog::rotating_logger_mt(name, flags.log_file, flags.log_max_mb << 20, flags.log_files);
    logger->flush_on(spdlog::level::trace);  // daemons log little; a crash loses no line
  }
  logger->set_level(spdlog::level::from_str(flags.log_level));
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %n: %v");
  spdlog::set_default_logger(logger);
  return logger;
}

absl::StatusOr<std::shared_ptr<spdlog::logger>> MakeLoggerOrError(const std::string& name,
                                                                  const CommonFlags& flags) {
  try {
    return MakeLogger(name, flags);
  } catch (const spdlog::spdlog_ex& e) {
    return absl::InvalidArgumentError(fmt::format("--log-file {}: {}", flags.log_file, e.what()));
  }
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
