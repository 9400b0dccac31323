// SessionCache::Impl's bookkeeping (transfer/internal/session_cache.h): the sessions counted
// per key as pulls take, use and give them back, and which waiting pull a change wakes.

#include "transfer/internal/session_cache.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <string>
#include <thread>
#include <vector>

namespace gfrep::transfer {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using Impl = SessionCache::Impl;

Impl::Warm WarmTo(const std::string& key) {
  Impl::Warm w;
  w.key = key;
  return w;
}

TEST(SessionCacheImplTest, OpenCountsTheSessionsOfAKeyInUseAndIdleThroughEveryChange) {
  SessionCache cache(60s, 2);
  Impl& c = cache.impl();
  auto a1 = c.Use("a", nullptr, true);
  auto a2 = c.Use("a", nullptr, true);
  auto b1 = c.Use("b", nullptr, true);
  EXPECT_EQ(c.Open("a"), 2u);
  EXPECT_EQ(c.Open("b"), 1u);
  EXPECT_EQ(c.Open("c"), 0u);
  c.Release(a1, WarmTo("a"));  // back to the idle ones: still open
  EXPECT_EQ(c.Open("a"), 2u);
  c.Release(a1, WarmTo("a"));  // a second release of the same use changes nothing
  EXPECT_EQ(c.Open("a"), 2u);
  EXPECT_EQ(cache.idle(), 1u);
  std::optional<Impl::Warm> w = c.Take("a");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(c.Open("a"), 1u);  // taken out: the pull that took it uses it next
  auto a3 = c.Use("a", nullptr, true);
  EXPECT_EQ(c.Open("a"), 2u);
  c.Release(a2, std::nullopt);  // failed: closed
  EXPECT_EQ(c.Open("a"), 1u);
  // Idle beyond max_idle (2): the least recently used one closes.
  c.Release(a3, WarmTo("a"));
  c.Release(b1, WarmTo("b"));
  auto x = c.Use("x", nullptr, true);
  c.Release(x, WarmTo("x"));
  EXPECT_EQ(cache.idle(), 2u);
  EXPECT_EQ(c.Open("a"), 0u);
  EXPECT_EQ(c.Open("b") + c.Open("x"), 2u);
  c.CloseAll();
  EXPECT_EQ(c.Open("b") + c.Open("x"), 0u);
  EXPECT_TRUE(c.open_count.empty());
}

TEST(SessionCacheImplTest, IdleSessionsPastTheLimitAreClosedAndUncounted) {
  SessionCache cache(0ms, 8);
  Impl& c = cache.impl();
  auto a = c.Use("a", nullptr, true);
  c.Release(a, WarmTo("a"));
  EXPECT_EQ(c.Open("a"), 1u);
  std::this_thread::sleep_for(2ms);
  EXPECT_FALSE(c.Take("a").has_value());
  EXPECT_EQ(c.Open("a"), 0u);
}

TEST(SessionCacheImplTest, AChangeWakesTheLongestWaitingPullOfItsKeyOnly) {
  // One change serves one pull (a session put back, one that began receiving, one that
  // closed); before, every change woke every waiting pull, which then walked every session
  // comparing keys: most of a small file's CPU in the destination agent at 256 copies.
  asio::io_context io;
  SessionCache cache;
  Impl& c = cache.impl();
  std::vector<std::string> woke;
  auto wait = [&](std::string key, std::string name) -> asio::awaitable<void> {
    co_await c.Wait(key, 10s);
    woke.push_back(name);
  };
  asio::co_spawn(io, wait("a", "a1"), asio::detached);
  asio::co_spawn(io, wait("a", "a2"), asio::detached);
  asio::co_spawn(io, wait("b", "b1"), asio::detached);
  io.run_for(20ms);
  EXPECT_TRUE(woke.empty());
  c.Changed("a");
  io.run_for(20ms);
  EXPECT_EQ(woke, (std::vector<std::string>{"a1"}));
  auto used = c.Use("a", nullptr, true);
  c.Release(used, std::nullopt);  // a release is a change of its key
  io.run_for(20ms);
  EXPECT_EQ(woke, (std::vector<std::string>{"a1", "a2"}));
  c.Changed("a");  // nobody waits for "a" now
  c.Changed("b");
  io.run_for(20ms);
  EXPECT_EQ(woke, (std::vector<std::string>{"a1", "a2", "b1"}));
  EXPECT_TRUE(c.waiters.empty());
}

}  // namespace
}  // namespace gfrep::transfer
