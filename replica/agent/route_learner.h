#pragma once

// Passive route learning (issue 9: "agents also learn passively and keep the table
// fresh"): what a destination agent learns of each route its copies come over, from the
// copies themselves, with no probe traffic. Every copy reports its received bytes as they
// arrive (goodput per route over 10-s windows) and, when it ends, the sender's TCP figures
// for the file (transfer/tcp_figures.h: least and smoothed RTT, bytes re-sent). The agent
// sends a RouteObservation per route with each heartbeat, and the catalog folds them into
// Route::observed, where source selection and operators (`gfroute list`) find them.
// The agent's tuner (in_flight.h) takes the same TCP figures over all routes as its
// congestion signals.
//
// Thread safety: every method may be called from any thread (one internal mutex).

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "catalog/types.h"
#include "transfer/tcp_figures.h"

namespace gfrep::replica::agent {

// TCP figures of several copies added up: bytes summed, RTTs averaged by bytes sent.
class TcpTally {
 public:
  void Add(const transfer::TcpFigures& f);
  bool empty() const { return copies_ == 0; }
  double loss() const;           // re-sent / sent bytes, 0 if nothing was sent
  double rtt_inflation() const;  // smoothed / least RTT, 0 if unknown
  double min_rtt_ms() const { return min_rtt_ms_; }
  double srtt_ms() const;        // averaged by bytes sent

 private:
  int copies_ = 0;
  std::uint64_t sent_ = 0;
  std::uint64_t retrans_ = 0;
  double srtt_weighted_ = 0;     // sum of srtt x weight over copies with both RTTs
  double min_rtt_weighted_ = 0;  // sum of min_rtt x weight over the same copies
  double weight_ = 0;
  double min_rtt_ms_ = 0;        // least of the copies' least RTTs
};

class RouteLearner {
 public:
  using Clock = std::chrono::steady_clock;
  // Goodput is averaged over windows of this length; the best window that ended since the
  // last report is the observation's peak (0 before the route carried a whole window).
  static constexpr std::chrono::seconds kWindow{10};

  // `bytes` more were received from a copy over the route from `src_site`.
  void AddBytes(const std::string& src_site, std::uint64_t bytes, Clock::time_point now);
  // A copy over the route from `src_site` ended; `tcp` is what its sender reported, and
  // `congestion` the algorithm its sender's sockets really used (empty: not known).
  void AddCopy(const std::string& src_site, const transfer::TcpFigures& tcp, const std::string& congestion = "");
  // One observation per route that carried bytes or copies since the last call.
  std::vector<catalog::RouteObservation> Report();
  // The TCP figures of the copies that ended since the last call, over all routes.
  TcpTally TakeRecent();

 private:
  struct PerRoute {
    std::uint64_t total = 0;  // bytes ever received over the route
    // (time, total) about once a second, the oldest at least kWindow before the newest.
    std::deque<std::pair<Clock::time_point, std::uint64_t>> samples;
    std::uint64_t reported_total = 0;  // `total` at the last report
    std::uint64_t peak_bps = 0;        // best window since the last report
    TcpTally tcp;                      // copies that ended since the last report
    std::string congestion;            // the latest copy's sender's algorithm
  };
  absl::Mutex mu_;
  std::map<std::string, PerRoute> routes_ ABSL_GUARDED_BY(mu_);  // by source site
  TcpTally recent_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gfrep::replica::agent
