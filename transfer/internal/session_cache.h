#pragma once

// The state behind transfer::SessionCache (client.h): warm sessions (an authenticated control
// connection and its joined data connections) to source agents, keyed by the agent and the
// route settings that shaped the connections.

#include <chrono>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
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
    bool pipelines = false;  // the agent takes gets ahead of an outcome (its first offer)
    std::chrono::steady_clock::time_point idle_since;
  };

  // A session while a pull uses it. Another pull may send its get ahead on it (pipelining,
  // SetPipelining) and wait here until the session is handed to it.
  struct Busy {
    std::string key;
    internal::ConnPtr ctrl;
    bool pipelines = false;  // the agent's first offer said "pipeline"
    bool receiving = false;  // past the offer: the current file's bytes are coming
    bool successor = false;  // a pull sent its get ahead on this session
    bool successor_gone = false;  // ...and ended before the session came to it
    bool released = false;        // the current pull ended: `handed`, or the session is gone
    std::optional<Warm> handed;
    std::shared_ptr<Busy> next;   // with `handed`: the session in use by the successor now
    std::shared_ptr<internal::asio::steady_timer> wake;  // the successor waits on it
  };

  std::chrono::milliseconds idle_limit;
  std::size_t max_idle;
  std::size_t pipeline_after = 0;  // SetPipelining
  std::list<Warm> warm;  // least recently used first
  std::list<std::shared_ptr<Busy>> busy;
  // Sessions per key, idle and in use (what Open returns): kept as `warm` and `busy` change,
  // so that a pull's choice costs no walk over every session (hundreds at once for small
  // files, each compared by its key).
  std::unordered_map<std::string, std::size_t> open_count;
  Stats stats;

  // The most recently used warm session for `key` that is not past the idle limit, taken
  // out of the cache; sessions past it are closed on the way.
  std::optional<Warm> Take(const std::string& key);
  // Keeps `w` (closing the least recently used one beyond max_idle).
  void Put(Warm w);
  void CloseAll();

  // A pull now uses a session to `key` over `ctrl` (a warm one, or one it opens).
  std::shared_ptr<Busy> Use(const std::string& key, internal::ConnPtr ctrl, bool pipelines);
  // Sessions to `key`, idle and in use.
  std::size_t Open(const std::string& key) const;
  // A session in use to `key` that takes a get ahead now: the agent pipelines, the current
  // file's bytes are coming and no other pull went ahead on it. Null if none.
  std::shared_ptr<Busy> Ahead(const std::string& key) const;
  // The current pull of `b` ended: the session goes to the pull that went ahead on it, else
  // to the idle ones (`w` set); or it is closed (`w` empty: the pull failed), and so is one
  // whose successor is gone (the agent is sending it a file nobody reads). A use is released
  // once: a second call closes `w` and changes nothing else.
  void Release(const std::shared_ptr<Busy>& b, std::optional<Warm> w);
  // A session to `key` changed so that one waiting pull (Wait) may now go on: a warm session
  // was put back, one began receiving (a get may go ahead on it) or one closed (a new one may
  // open). Wakes the pull that has waited longest for `key`: one change serves one pull; the
  // others wait for the next change (or their limit).
  void Changed(const std::string& key);
  // Until a Changed(key) wakes this pull, or `limit`.
  internal::asio::awaitable<void> Wait(const std::string& key, std::chrono::milliseconds limit);
  // Until `b` is released (its successor waits so; only that release wakes it), or `limit`.
  internal::asio::awaitable<void> WaitFor(const std::shared_ptr<Busy>& b,
                                          std::chrono::milliseconds limit);
  // Pulls waiting in Wait, per key, longest waiting first (entries of pulls that stopped
  // waiting are expired and skipped).
  std::unordered_map<std::string, std::deque<std::weak_ptr<internal::asio::steady_timer>>> waiters;
  // open_count[key] one up or down.
  void Count(const std::string& key, bool up);
};

namespace internal {
// What a warm session must match to be reused: the agent and every setting of the route that
// shaped its connections (streams, buffers, congestion control, per-stream pacing, TLS) and
// the route's name (the agent's token bucket).
std::string SessionKey(const Endpoint& agent, const TransferOptions& options);
}  // namespace internal

}  // namespace gfrep::transfer
