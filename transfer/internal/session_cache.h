#pragma once

// The state behind transfer::SessionCache (client.h): warm sessions (an authenticated control
// connection and its joined data connections) to source agents, keyed by the agent and the
// route settings that shaped the connections.

#include <chrono>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transfer/client.h"
#include "transfer/internal/engine.h"

namespace gfrep::transfer {

struct SessionCache::Impl {
  struct Warm {
    std::string key;
    internal::ConnPtr ctrl;
    std::vector<internal::ConnPtr> data;
    std::shared_ptr<internal::asio::ssl::context> tls;  // the connections' TLS context
    std::string congestion;                             // what the agent's sockets use
    std::chrono::steady_clock::time_point idle_since;
  };

  std::chrono::milliseconds idle_limit;
  std::size_t max_idle;
  std::list<Warm> warm;  // least recently used first
  Stats stats;

  // The most recently used warm session for `key` that is not past the idle limit, taken
  // out of the cache; sessions past it are closed on the way.
  std::optional<Warm> Take(const std::string& key);
  // Keeps `w` (closing the least recently used one beyond max_idle).
  void Put(Warm w);
  void CloseAll();
};

namespace internal {
// What a warm session must match to be reused: the agent and every setting of the route that
// shaped its connections (streams, buffers, congestion control, per-stream pacing, TLS) and
// the route's name (the agent's token bucket).
std::string SessionKey(const Endpoint& agent, const TransferOptions& options);
}  // namespace internal

}  // namespace gfrep::transfer
