#include "netprobe/topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

namespace gfrep::netprobe {
namespace {

constexpr int kMaxSites = 16;
constexpr int kMaxNodesPerSite = 32;
constexpr int kMaxRoutes = 32;
constexpr std::size_t kMaxLineBytes = 1024;
constexpr std::size_t kMaxFileBytes = 64 * 1024;

std::vector<std::string_view> SplitWords(std::string_view line) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    std::size_t j = i;
    while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j]))) ++j;
    if (j > i) words.push_back(line.substr(i, j - i));
    i = j;
  }
  return words;
}

bool ValidName(std::string_view name, std::size_t max, bool dash) {
  if (name.empty() || name.size() > max) return false;
  return std::all_of(name.begin(), name.end(), [dash](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (dash && c == '-');
  });
}

// A decimal number followed by a unit from `units` (name -> multiplier).
absl::StatusOr<double> ParseWithUnit(std::string_view text, const std::map<std::string, double>& units,
                                     std::string_view what) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' ||
                             text[i] == 'e' || text[i] == 'E' ||
                             ((text[i] == '-' || text[i] == '+') && i > 0 &&
                              (text[i - 1] == 'e' || text[i - 1] == 'E')))) {
    ++i;
  }
  double value = 0;
  const std::string number(text.substr(0, i));
  auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || ec != std::errc() || ptr != number.data() + number.size() ||
      !std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(fmt::format("bad {} '{}'", what, text));
  }
  auto unit = units.find(std::string(text.substr(i)));
  if (unit == units.end()) {
    return absl::InvalidArgumentError(fmt::format("bad unit in {} '{}'", what, text));
  }
  return value * unit->second;
}

}  // namespace

absl::StatusOr<std::chrono::microseconds> ParseDuration(std::string_view text) {
  static const std::map<std::string, double> kUnits = {{"us", 1.0}, {"ms", 1e3}, {"s", 1e6}};
  absl::StatusOr<double> us = ParseWithUnit(text, kUnits, "duration (e.g. 200ms)");
  if (!us.ok()) return us.status();
  if (*us > 20e6) return absl::InvalidArgumentError(fmt::format("duration {} exceeds 20s", text));
  return std::chrono::microseconds(static_cast<std::int64_t>(std::llround(*us)));
}

absl::StatusOr<std::uint64_t> ParseBitRate(std::string_view text) {
  static const std::map<std::string, double> kUnits = {
      {"", 1.0}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}};
  absl::StatusOr<double> bps = ParseWithUnit(text, kUnits, "rate (e.g. 622M)");
  if (!bps.ok()) return bps.status();
  if (*bps > 400e9) return absl::InvalidArgumentError(fmt::format("rate {} exceeds 400G", text));
  return static_cast<std::uint64_t>(std::llround(*bps));
}

absl::StatusOr<std::uint64_t> ParseByteSize(std::string_view text) {
  static const std::map<std::string, double> kUnits = {
      {"", 1.0}, {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0}};
  absl::StatusOr<double> bytes = ParseWithUnit(text, kUnits, "size (e.g. 64M)");
  if (!bytes.ok()) return bytes.status();
  if (*bytes > 4294967296.0) {
    return absl::InvalidArgumentError(fmt::format("size {} exceeds 4G", text));
  }
  return static_cast<std::uint64_t>(std::llround(*bytes));
}

std::string RouterNamespace(std::string_view site) { return fmt::format("gfrep-{}-rt", site); }
std::string NodeNamespace(std::string_view site, int index) {
  return fmt::format("gfrep-{}-n{}", site, index);
}
std::string RouteDevice(std::string_view route) { return fmt::format("r-{}", route); }

int SiteIndex(const Topology& topology, std::string_view site) {
  for (std::size_t i = 0; i < topology.sites.size(); ++i) {
    if (topology.sites[i].name == site) return static_cast<int>(i) + 1;
  }
  return 0;
}

int RouteIndex(const Topology& topology, std::string_view route) {
  for (std::size_t i = 0; i < topology.routes.size(); ++i) {
    if (topology.routes[i].name == route) return static_cast<int>(i) + 1;
  }
  return 0;
}

std::vector<NodeInfo> Nodes(const Topology& topology) {
  std::vector<NodeInfo> nodes;
  for (std::size_t s = 0; s < topology.sites.size(); ++s) {
    const SiteSpec& site = topology.sites[s];
    for (int i = 1; i <= site.nodes; ++i) {
      nodes.push_back({fmt::format("{}-n{}", site.name, i), site.name, i,
                       NodeNamespace(site.name, i), fmt::format("10.99.{}.{}", s + 1, 10 + i)});
    }
  }
  return nodes;
}

absl::StatusOr<NodeInfo> FindNode(const Topology& topology, std::string_view node) {
  for (NodeInfo& info : Nodes(topology)) {
    if (info.name == node) return std::move(info);
  }
  return absl::NotFoundError(fmt::format("no node '{}' in topology {}", node, topology.name));
}

absl::StatusOr<Topology> ParseTopology(std::string_view text) {
  if (text.size() > kMaxFileBytes) {
    return absl::InvalidArgumentError(
        fmt::format("topology file is {} bytes, more than {}", text.size(), kMaxFileBytes));
  }
  Topology topology;
  int line_number = 0;
  auto error = [&](const std::string& message) {
    return absl::InvalidArgumentError(fmt::format("line {}: {}", line_number, message));
  };
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (line.size() > kMaxLineBytes) return error("line too long");
    if (std::size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    std::vector<std::string_view> words = SplitWords(line);
    if (words.empty()) continue;
    const std::string_view keyword = words[0];
    if (topology.name.empty() && keyword != "topology") {
      return error("the first statement must be 'topology NAME'");
    }
    // key=value arguments after `positional` leading words.
    auto key_values = [&](std::size_t positional,
                          const std::set<std::string>& allowed,
                          const std::set<std::string>& required)
        -> absl::StatusOr<std::map<std::string, std::string>> {
      std::map<std::string, std::string> kv;
      for (std::size_t i = positional; i < words.size(); ++i) {
        const std::size_t eq = words[i].find('=');
        if (eq == std::string_view::npos) {
          return error(fmt::format("{}: expected key=value, got '{}'", keyword, words[i]));
        }
        std::string key(words[i].substr(0, eq));
        if (!allowed.contains(key)) return error(fmt::format("{}: unknown key '{}'", keyword, key));
        if (!kv.emplace(key, words[i].substr(eq + 1)).second) {
          return error(fmt::format("{}: duplicate key '{}'", keyword, key));
        }
      }
      for (const std::string& key : required) {
        if (!kv.contains(key)) return error(fmt::format("{}: missing {}=", keyword, key));
      }
      return kv;
    };
    if (keyword == "topology") {
      if (!topology.name.empty()) return error("duplicate 'topology' statement");
      if (words.size() != 2 || !ValidName(words[1], 24, true)) {
        return error("expected 'topology NAME' with NAME of 1-24 characters [a-z0-9-]");
      }
      topology.name = std::string(words[1]);
    } else if (keyword == "site") {
      if (words.size() < 2 || !ValidName(words[1], 8, false)) {
        return error("expected 'site NAME nodes=N' with NAME of 1-8 characters [a-z0-9]");
      }
      if (SiteIndex(topology, words[1]) != 0) {
        return error(fmt::format("duplicate site '{}'", words[1]));
      }
      if (topology.sites.size() >= kMaxSites) return error("too many sites");
      auto kv = key_values(2, {"nodes"}, {"nodes"});
      if (!kv.ok()) return kv.status();
      int nodes = 0;
      const std::string& n = kv->at("nodes");
      auto [ptr, ec] = std::from_chars(n.data(), n.data() + n.size(), nodes);
      if (ec != std::errc() || ptr != n.data() + n.size() || nodes < 1 ||
          nodes > kMaxNodesPerSite) {
        return error(fmt::format("site {}: nodes must be 1-{}, got '{}'", words[1],
                                 kMaxNodesPerSite, n));
      }
      topology.sites.push_back({std::string(words[1]), nodes});
    } else if (keyword == "route") {
      if (words.size() < 4 || !ValidName(words[1], 12, false)) {
        return error(
            "expected 'route NAME SITE_A SITE_B rtt=.. rate=..' with NAME of 1-12 characters "
            "[a-z0-9]");
      }
      RouteSpec route;
      route.name = std::string(words[1]);
      route.site_a = std::string(words[2]);
      route.site_b = std::string(words[3]);
      if (RouteIndex(topology, route.name) != 0) {
        return error(fmt::format("duplicate route '{}'", route.name));
      }
      if (topology.routes.size() >= kMaxRoutes) return error("too many routes");
      for (const std::string& site : {route.site_a, route.site_b}) {
        if (SiteIndex(topology, site) == 0) {
          return error(fmt::format("route {}: unknown site '{}' (declare sites before routes)",
                                   route.name, site));
        }
      }
      if (route.site_a == route.site_b) {
        return error(fmt::format("route {}: both ends are site '{}'", route.name, route.site_a));
      }
      auto kv = key_values(4, {"rtt", "rate", "loss", "queue"}, {"rtt", "rate"});
      if (!kv.ok()) return kv.status();
      auto rtt = ParseDuration(kv->at("rtt"));
      if (!rtt.ok()) return error(fmt::format("route {}: {}", route.name, std::string(rtt.status().message())));
      route.rtt = *rtt;
      auto rate = ParseBitRate(kv->at("rate"));
      if (!rate.ok()) return error(fmt::format("route {}: {}", route.name, std::string(rate.status().message())));
      if (*rate < 1000) return error(fmt::format("route {}: rate below 1k", route.name));
      route.rate_bps = *rate;
      if (kv->contains("loss")) {
        const std::string& l = kv->at("loss");
        double loss = -1;
        auto [ptr, ec] = std::from_chars(l.data(), l.data() + l.size(), loss);
        if (ec != std::errc() || ptr != l.data() + l.size() || !(loss >= 0 && loss < 1)) {
          return error(fmt::format("route {}: loss must be within [0, 1), got '{}'", route.name, l));
        }
        route.loss = loss;
      }
      if (kv->contains("queue")) {
        auto queue = ParseByteSize(kv->at("queue"));
        if (!queue.ok()) {
          return error(fmt::format("route {}: {}", route.name, std::string(queue.status().message())));
        }
        route.queue_bytes = *queue;
      }
      topology.routes.push_back(std::move(route));
    } else if (keyword == "pin") {
      if (words.size() != 3) return error("expected 'pin NODE ROUTE'");
      PinSpec pin{std::string(words[1]), std::string(words[2])};
      absl::StatusOr<NodeInfo> node = FindNode(topology, pin.node);
      if (!node.ok()) return error(fmt::format("pin: unknown node '{}'", pin.node));
      const int route = RouteIndex(topology, pin.route);
      if (route == 0) return error(fmt::format("pin: unknown route '{}'", pin.route));
      const RouteSpec& spec = topology.routes[route - 1];
      if (spec.site_a != node->site && spec.site_b != node->site) {
        return error(fmt::format("pin: route {} does not touch site {}", pin.route, node->site));
      }
      for (const PinSpec& other : topology.pins) {
        if (other.node == pin.node) return error(fmt::format("pin: node {} pinned twice", pin.node));
      }
      topology.pins.push_back(std::move(pin));
    } else if (keyword == "buffer") {
      if (words.size() != 2) return error("expected 'buffer SIZE'");
      auto size = ParseByteSize(words[1]);
      if (!size.ok()) return error(std::string(std::string(size.status().message())));
      if (*size < 65536 || *size > (1ULL << 30)) return error("buffer must be within [64K, 1G]");
      topology.buffer_bytes = *size;
    } else if (keyword == "mtu") {
      int mtu = 0;
      if (words.size() != 2) return error("expected 'mtu N'");
      auto [ptr, ec] = std::from_chars(words[1].data(), words[1].data() + words[1].size(), mtu);
      if (ec != std::errc() || ptr != words[1].data() + words[1].size() || mtu < 1280 ||
          mtu > 65000) {
        return error(fmt::format("mtu must be within [1280, 65000], got '{}'", words[1]));
      }
      topology.mtu = mtu;
    } else if (keyword == "cc") {
      if (words.size() != 2 || !ValidName(words[1], 16, false)) return error("expected 'cc NAME'");
      topology.congestion_control = std::string(words[1]);
    } else {
      return error(fmt::format("unknown statement '{}'", keyword));
    }
  }
  if (topology.name.empty()) return absl::InvalidArgumentError("empty topology: no 'topology NAME'");
  if (topology.sites.empty()) return absl::InvalidArgumentError("topology has no sites");
  return topology;
}

}  // namespace gfrep::netprobe
