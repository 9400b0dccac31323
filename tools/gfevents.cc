// gfevents [--kind KIND] [-n N] [--json]: the catalog's event log, newest last: replica,
// task, request, node and route changes, and (with mutual TLS) the audit record of every refused
// call: who, what, from where.
#include <ctime>
#include <iostream>

#include <fmt/format.h>

#include "catalog/client.h"
#include "catalog/event_cursor.h"
#include "tools/internal/catalog_flags.h"
#include "tools/internal/cli.h"

namespace {

std::string UtcTime(std::int64_t ns) {
  const std::time_t s = static_cast<std::time_t>(ns / 1'000'000'000);
  std::tm tm{};
  ::gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03}Z", buf, (ns / 1'000'000) % 1000);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gfrep;
  constexpr const char* kProgram = "gfevents";
  CLI::App app{"gfevents: show the catalog's event log (newest last)"};
  tools::CommonFlags common;
  tools::CatalogFlags cat;
  std::string kind;
  std::size_t last = 20;
  bool json = false;
  tools::AddCommonFlags(app, common);
  tools::AddCatalogFlags(app, cat);
  app.add_option("--kind", kind, "Only events of this kind: replica, task, request, node, audit, route");
  app.add_option("-n,--last", last, "How many of the newest (matching) events")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_flag("--json", json, "One JSON object per event: {seq, time_ns, kind, id, node, state, detail}");
  CLI11_PARSE(app, argc, argv);
  tools::MakeLogger(kProgram, common);
  if (!kind.empty() && kind != "replica" && kind != "task" && kind != "request" && kind != "node" &&
      kind != "audit" && kind != "route") {
    return tools::Fail(kProgram,
                       fmt::format("--kind {}: not one of replica, task, request, node, audit, route", kind));
  }
  auto client = tools::ConnectCatalog(cat);
  if (!client.ok()) return tools::Fail(kProgram, tools::ErrorText(client.status()));
  // The log keeps a bounded history; read it all, oldest first, keeping the newest matches.
  std::vector<catalog::Event> kept;
  catalog::EventCursor cursor(**client);
  cursor.Seek(0);
  for (;;) {
    absl::StatusOr<std::vector<catalog::Event>> batch = cursor.Read();
    if (!batch.ok()) return tools::Fail(kProgram, tools::ErrorText(batch.status()));
    if (batch->empty()) break;
    for (catalog::Event& e : *batch) {
      if (!kind.empty() && catalog::ToString(e.kind) != kind) continue;
      kept.push_back(std::move(e));
    }
    if (kept.size() > 2 * last) kept.erase(kept.begin(), kept.end() - static_cast<std::ptrdiff_t>(last));
  }
  if (kept.size() > last) kept.erase(kept.begin(), kept.end() - static_cast<std::ptrdiff_t>(last));
  for (const catalog::Event& e : kept) {
    if (json) {
      std::cout << nlohmann::json{{"seq", e.seq}, {"time_ns", e.time_ns}, {"kind", catalog::ToString(e.kind)},
                                  {"id", e.id}, {"node", e.node}, {"state", e.state}, {"detail", e.detail}}
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
      continue;
    }
    std::cout << fmt::format("{} {:>8} {:<7} {:<14} {:<10} {}{}\n", UtcTime(e.time_ns), e.seq,
                             catalog::ToString(e.kind), e.node, e.state, e.id != 0 ? fmt::format("#{} ", e.id) : "",
                             e.detail);
  }
  return 0;
}
