#include "transfer/internal/session_cache.h"

#include <fmt/format.h>

namespace gfrep::transfer {
namespace {

void CloseWarm(SessionCache::Impl::Warm& w) {
  if (w.ctrl) w.ctrl->Close();
  for (const internal::ConnPtr& c : w.data) {
    if (c) c->Close();
  }
}

}  // namespace

SessionCache::SessionCache(std::chrono::milliseconds idle_limit, std::size_t max_idle)
    : impl_(std::make_unique<Impl>()) {
  impl_->idle_limit = idle_limit;
  impl_->max_idle = max_idle;
}

SessionCache::~SessionCache() { impl_->CloseAll(); }

std::size_t SessionCache::idle() const { return impl_->warm.size(); }
const SessionCache::Stats& SessionCache::stats() const { return impl_->stats; }
void SessionCache::Clear() { impl_->CloseAll(); }

std::optional<SessionCache::Impl::Warm> SessionCache::Impl::Take(const std::string& key) {
  auto now = std::chrono::steady_clock::now();
  std::optional<Warm> found;
  for (auto it = warm.end(); it != warm.begin();) {
    --it;
    if (now - it->idle_since > idle_limit) {
      CloseWarm(*it);
      it = warm.erase(it);
      continue;
    }
    if (!found && it->key == key) {
      found = std::move(*it);
      it = warm.erase(it);
    }
  }
  return found;
}

void SessionCache::Impl::Put(Warm w) {
  w.idle_since = std::chrono::steady_clock::now();
  warm.push_back(std::move(w));
  while (warm.size() > max_idle) {
    CloseWarm(warm.front());
    warm.pop_front();
  }
}

void SessionCache::Impl::CloseAll() {
  for (Warm& w : warm) CloseWarm(w);
  warm.clear();
}

namespace internal {

std::string SessionKey(const Endpoint& agent, const TransferOptions& o) {
  // Not the route's rate: a get over a warm session carries its own, which the agent's
  // token bucket for the route takes on (a route's rate share changes as tasks come and go).
  return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}", agent.ToString(), o.route.streams,
                     o.route.socket_buffer, o.route.congestion, o.route.stream_rate_bps,
                     o.route.route_name, o.tls, o.tls_control);
}

}  // namespace internal
}  // namespace gfrep::transfer
