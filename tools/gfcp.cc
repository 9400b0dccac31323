// gfcp: copy a file between a local path and a gfsited agent, or between two agents
// (third-party: the bytes flow directly between the agents).
//   gfcp -p 8 big.dat gf://siteA:7000/run1/big.dat
//   gfcp -p 8 gf://siteA:7000/run1/big.dat gf://siteB:7000/run1/big.dat

#include <unistd.h>

#include <csignal>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/internal/cli.h"
#include "transfer/auth.h"
#include "transfer/copy.h"
#include "transfer/units.h"

namespace {

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

std::string Eta(double seconds) {
  if (!(seconds >= 0) || seconds > 359999) return "--:--";
  auto s = static_cast<long>(seconds + 0.5);
  return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gfcp: striped multi-stream copy between local files and gfsited agents\n"
               "SRC and DST are local paths or gf://HOST:PORT/PATH (PATH inside the agent's spool)"};
  gfrep::tools::CommonFlags common;
  gfrep::tools::AddCommonFlags(app, common);
  int streams = 4;
  std::string buffer = "0", stripe = "4M", rate = "0", route_rate = "0", cc, checksum = "xxh3-tree";
  std::string block_checksum = "xxh3-64", key_file, tls_ca, tls_cert, tls_key;
  bool tls = false, json = false;
  double timeout = 30;
  std::string journal_interval = "256M";
  std::int64_t corrupt_offset = -1;
  int corrupt_times = 1;
  std::string src, dst;
  app.add_option("-p,--streams", streams, "parallel data streams (1-64)");
  app.add_option("--buffer", buffer, "socket buffer per stream, e.g. 4M (0 = kernel autotuning)");
  app.add_option("--stripe", stripe, "stripe unit: bytes per block dealt to a free stream");
  app.add_option("--rate", rate, "pacing per stream in bit/s, e.g. 100M (0 = none)");
  app.add_option("--route-rate", route_rate, "cap for all streams together in bit/s, e.g. 1G");
  app.add_option("--cc", cc, "TCP congestion control (cubic, bbr, highspeed, ...)");
  app.add_flag("--tls", tls, "encrypt control and data connections with TLS");
  app.add_option("--tls-ca", tls_ca,
                 "PEM CA that signed the agents' certificates; alone (without --tls) the control "
                 "connection is mutual TLS and the data travels in clear");
  app.add_option("--tls-cert", tls_cert, "PEM client certificate (certificate authentication)");
  app.add_option("--tls-key", tls_key, "PEM key of --tls-cert");
  app.add_option("--checksum", checksum,
                 "end-to-end checksum: xxh3-tree (in one pass with the block checks), xxh3-128, "
                 "adler32, sha256");
  app.add_option("--block-checksum", block_checksum, "per-block checksum: xxh3-64, crc32c");
  app.add_option("--key-file", key_file, "shared key file (default ~/.gfrep/shared_key)");
  app.add_option("--timeout", timeout, "seconds without progress before giving up");
  app.add_option("--journal-interval", journal_interval, "when receiving: make restart markers durable every SIZE bytes");
  app.add_flag("--json", json, "print a JSON summary on stdout");
  app.add_option("--test-corrupt-offset", corrupt_offset, "")->group("");
  app.add_option("--test-corrupt-times", corrupt_times, "")->group("");
  app.add_option("SRC", src, "source: local path or gf://HOST:PORT/PATH")->required();
  app.add_option("DST", dst, "destination: local path or gf://HOST:PORT/PATH")->required();
  CLI11_PARSE(app, argc, argv);
  auto log = gfrep::tools::MakeLogger("gfcp", common);
  std::signal(SIGPIPE, SIG_IGN);

  gfrep::transfer::TransferOptions o;
  o.route.streams = streams;
  for (auto [text, out] : {std::pair{&buffer, &o.route.socket_buffer}, std::pair{&stripe, &o.route.stripe_unit},
                           std::pair{&journal_interval, &o.journal_interval}}) {
    absl::StatusOr<std::uint64_t> v = gfrep::tools::ParseSize(*text);
    if (!v.ok()) return gfrep::tools::Fail("gfcp", Msg(v.status()));
    *out = *v;
  }
  for (auto [text, out] : {std::pair{&rate, &o.route.stream_rate_bps}, std::pair{&route_rate, &o.route.route_rate_bps}}) {
    absl::StatusOr<std::uint64_t> v = gfrep::tools::ParseRate(*text);
    if (!v.ok()) return gfrep::tools::Fail("gfcp", Msg(v.status()));
    *out = *v;
  }
  o.route.congestion = cc;
  o.checksum = checksum;
  o.block_checksum = block_checksum;
  o.tls = tls;
  o.tls_control = !tls_ca.empty();
  o.tls_options = {tls_cert, tls_key, tls_ca};
  if (!(timeout > 0 && timeout < 86400)) return gfrep::tools::Fail("gfcp", "--timeout must be 0..86400 seconds");
  o.io_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout * 1000));
  o.test_corrupt_offset = corrupt_offset;
  o.test_corrupt_times = corrupt_times;
  o.logger = log;
  std::filesystem::path key_path = key_file.empty() ? gfrep::transfer::DefaultKeyPath() : std::filesystem::path(key_file);
  absl::StatusOr<std::string> key = gfrep::transfer::LoadOrCreateSharedKey(key_path);
  if (!key.ok()) return gfrep::tools::Fail("gfcp", Msg(key.status()));
  o.shared_key = *key;
  if (absl::Status s = gfrep::transfer::Validate(o); !s.ok()) return gfrep::tools::Fail("gfcp", Msg(s));

  bool tty = ::isatty(STDERR_FILENO) == 1;
  bool printed = false;
  if (tty) {
    o.progress = [&printed](const gfrep::transfer::Progress& p) {
      double moved = static_cast<double>(p.bytes_done - p.resumed_bytes);
      double rate_bps = p.seconds > 0 ? moved / p.seconds : 0;
      double pct = p.bytes_total ? 100.0 * static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 100;
      double eta = rate_bps > 0 ? static_cast<double>(p.bytes_total - p.bytes_done) / rate_bps : -1;
      std::fprintf(stderr, "\r%s / %s  %5.1f%%  %8.1f MB/s  ETA %s  streams %d   ",
                   gfrep::transfer::HumanBytes(p.bytes_done).c_str(),
                   gfrep::transfer::HumanBytes(p.bytes_total).c_str(), pct, rate_bps / 1e6,
                   Eta(eta).c_str(), p.streams);
      std::fflush(stderr);
      printed = true;
    };
  }

  absl::StatusOr<gfrep::transfer::TransferStats> stats = gfrep::transfer::Copy(src, dst, o);
  if (printed) std::fprintf(stderr, "\n");
  if (!stats.ok()) return gfrep::tools::Fail("gfcp", Msg(stats.status()));
  double mbit = stats->seconds > 0 ? static_cast<double>(stats->bytes_transferred) * 8 / stats->seconds / 1e6 : 0;
  if (json) {
    nlohmann::json j{{"source", src}, {"destination", dst}, {"bytes", stats->bytes},
                     {"bytes_transferred", stats->bytes_transferred}, {"seconds", stats->seconds},
                     {"mbit_per_s", mbit}, {"streams", stats->streams}, {"checksum", stats->checksum},
                     {"resumed_bytes", stats->resumed_bytes}, {"congestion", stats->congestion},
                     {"tls", stats->tls}, {"resend_rounds", stats->resend_rounds},
                     {"tcp", {{"bytes_sent", stats->tcp.bytes_sent},
                              {"bytes_retrans", stats->tcp.bytes_retrans},
                              {"srtt_ms", stats->tcp.srtt_ms},
                              {"min_rtt_ms", stats->tcp.min_rtt_ms}}}};
    std::printf("%s\n", j.dump().c_str());
  } else if (tty) {
    std::fprintf(stderr, "copied %s in %.2f s (%.1f MB/s, %d streams%s) %s\n",
                 gfrep::transfer::HumanBytes(stats->bytes).c_str(), stats->seconds,
                 static_cast<double>(stats->bytes_transferred) / stats->seconds / 1e6, stats->streams,
                 stats->resumed_bytes ? fmt::format(", resumed {}", gfrep::transfer::HumanBytes(stats->resumed_bytes)).c_str() : "",
                 stats->checksum.c_str());
  }
  return 0;
}
