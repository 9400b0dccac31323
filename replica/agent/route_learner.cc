#include "replica/agent/route_learner.h"

#include <algorithm>

namespace gfrep::replica::agent {

void TcpTally::Add(const transfer::TcpFigures& f) {
  ++copies_;
  sent_ += f.bytes_sent;
  retrans_ += std::min(f.bytes_retrans, f.bytes_sent);
  if (f.min_rtt_ms > 0) {
    min_rtt_ms_ = min_rtt_ms_ == 0 ? f.min_rtt_ms : std::min(min_rtt_ms_, f.min_rtt_ms);
  }
  if (f.min_rtt_ms > 0 && f.srtt_ms > 0) {
    // A copy that sent more says more about the path; one that sent nothing still counts.
    const double w = static_cast<double>(std::max<std::uint64_t>(f.bytes_sent, 1));
    srtt_weighted_ += f.srtt_ms * w;
    min_rtt_weighted_ += f.min_rtt_ms * w;
    weight_ += w;
  }
}

double TcpTally::loss() const {
  return sent_ == 0 ? 0 : static_cast<double>(retrans_) / static_cast<double>(sent_);
}

double TcpTally::rtt_inflation() const {
  return min_rtt_weighted_ > 0 ? srtt_weighted_ / min_rtt_weighted_ : 0;
}

double TcpTally::srtt_ms() const { return weight_ > 0 ? srtt_weighted_ / weight_ : 0; }

void RouteLearner::AddBytes(const std::string& src_site, std::uint64_t bytes,
                            Clock::time_point now) {
  absl::MutexLock lock(&mu_);
  PerRoute& r = routes_[src_site];
  r.total += bytes;
  if (!r.samples.empty() && now - r.samples.back().first < std::chrono::seconds(1)) return;
  r.samples.emplace_back(now, r.total);
  // Keep the newest sample that is a whole window old, and drop those before it.
  while (r.samples.size() >= 2 && now - r.samples[1].first >= kWindow) r.samples.pop_front();
  const auto& [then, at_then] = r.samples.front();
  const double seconds = std::chrono::duration<double>(now - then).count();
  if (now - then >= kWindow && seconds > 0) {
    const auto bps = static_cast<std::uint64_t>(static_cast<double>(r.total - at_then) * 8 / seconds);
    r.peak_bps = std::max(r.peak_bps, bps);
  }
}

void RouteLearner::AddCopy(const std::string& src_site, const transfer::TcpFigures& tcp,
                           const std::string& congestion) {
  absl::MutexLock lock(&mu_);
  PerRoute& r = routes_[src_site];
  r.tcp.Add(tcp);
  if (!congestion.empty()) r.congestion = congestion;
  recent_.Add(tcp);
}

std::vector<catalog::RouteObservation> RouteLearner::Report() {
  absl::MutexLock lock(&mu_);
  std::vector<catalog::RouteObservation> out;
  for (auto& [site, r] : routes_) {
    if (r.total == r.reported_total && r.tcp.empty()) continue;
    catalog::RouteObservation o;
    o.src_site = site;
    o.bytes = r.total - r.reported_total;
    o.min_rtt_ms = r.tcp.min_rtt_ms();
    o.srtt_ms = r.tcp.srtt_ms();
    o.loss = r.tcp.loss();
    o.peak_bps = std::min(r.peak_bps, catalog::kMaxObservedBps);
    o.congestion = r.congestion;
    out.push_back(std::move(o));
    r.reported_total = r.total;
    r.peak_bps = 0;
    r.tcp = TcpTally();
  }
  return out;
}

TcpTally RouteLearner::TakeRecent() {
  absl::MutexLock lock(&mu_);
  TcpTally t = recent_;
  recent_ = TcpTally();
  return t;
}

}  // namespace gfrep::replica::agent
