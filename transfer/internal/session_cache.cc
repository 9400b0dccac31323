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

void SessionCache::SetPipelining(std::size_t sessions) { impl_->pipeline_after = sessions; }
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
      Count(it->key, false);
      it = warm.erase(it);
      continue;
    }
    if (!found && it->key == key) {
      found = std::move(*it);
      Count(key, false);
      it = warm.erase(it);
    }
  }
  return found;
}

void SessionCache::Impl::Put(Warm w) {
  w.idle_since = std::chrono::steady_clock::now();
  Count(w.key, true);
  warm.push_back(std::move(w));
  while (warm.size() > max_idle) {
    CloseWarm(warm.front());
    Count(warm.front().key, false);
    warm.pop_front();
  }
}

void SessionCache::Impl::CloseAll() {
  for (Warm& w : warm) {
    CloseWarm(w);
    Count(w.key, false);
  }
  warm.clear();
}

void SessionCache::Impl::Count(const std::string& key, bool up) {
  if (up) {
    ++open_count[key];
    return;
  }
  auto it = open_count.find(key);
  if (it != open_count.end() && --it->second == 0) open_count.erase(it);
}

std::shared_ptr<SessionCache::Impl::Busy> SessionCache::Impl::Use(const std::string& key,
                                                                   internal::ConnPtr ctrl,
                                                                   bool pipelines) {
  auto b = std::make_shared<Busy>();
  b->key = key;
  b->ctrl = std::move(ctrl);
  b->pipelines = pipelines;
  busy.push_back(b);
  Count(key, true);
  return b;
}

std::size_t SessionCache::Impl::Open(const std::string& key) const {
  auto it = open_count.find(key);
  return it == open_count.end() ? 0 : it->second;
}

std::shared_ptr<SessionCache::Impl::Busy> SessionCache::Impl::Ahead(const std::string& key) const {
  for (const auto& b : busy) {
    if (b->pipelines && b->receiving && !b->successor && b->key == key) return b;
  }
  return nullptr;
}

void SessionCache::Impl::Release(const std::shared_ptr<Busy>& b, std::optional<Warm> w) {
  if (b->released) {  // released once: a second call only closes what it brought
    if (w) CloseWarm(*w);
    return;
  }
  busy.remove(b);
  Count(b->key, false);
  b->released = true;
  if (w && b->successor && !b->successor_gone) {
    // Still counted as open (Open) while the successor wakes.
    b->next = Use(w->key, w->ctrl, w->pipelines);
    b->handed = std::move(w);
  } else if (w && !b->successor) {
    Put(std::move(*w));
  } else if (w) {
    CloseWarm(*w);
  } else if (b->ctrl) {
    b->ctrl->Close();  // the successor's offer read ends
  }
  if (b->wake) b->wake->cancel();
  Changed(b->key);
}

void SessionCache::Impl::Changed(const std::string& key) {
  auto it = waiters.find(key);
  if (it == waiters.end()) return;
  std::deque<std::weak_ptr<internal::asio::steady_timer>>& q = it->second;
  while (!q.empty()) {
    std::shared_ptr<internal::asio::steady_timer> t = q.front().lock();
    q.pop_front();
    if (t) {
      t->cancel();
      break;
    }
  }
  if (q.empty()) waiters.erase(it);
}

internal::asio::awaitable<void> SessionCache::Impl::WaitFor(const std::shared_ptr<Busy>& b,
                                                             std::chrono::milliseconds limit) {
  b->wake = std::make_shared<internal::asio::steady_timer>(
      co_await internal::asio::this_coro::executor, limit);
  auto wake = b->wake;  // the Busy may be released meanwhile; the timer lives on here
  co_await wake->async_wait(internal::kNoThrow);
}

internal::asio::awaitable<void> SessionCache::Impl::Wait(const std::string& key,
                                                          std::chrono::milliseconds limit) {
  auto t = std::make_shared<internal::asio::steady_timer>(
      co_await internal::asio::this_coro::executor, limit);
  std::deque<std::weak_ptr<internal::asio::steady_timer>>& q = waiters[key];
  while (!q.empty() && q.front().expired()) q.pop_front();  // pulls that stopped waiting
  q.push_back(t);
  co_await t->async_wait(internal::kNoThrow);
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
