#pragma once

// The parts of SiteAgent's copy pipeline that site_agent.cc (Stop, lease renewal, the
// destructor of the blocking pool) and site_agent_copy.cc both use: an I/O thread of the
// copies, and one running copy.

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "catalog/types.h"
#include "replica/agent/copy_meter.h"
#include "replica/agent/site_agent.h"
#include "transfer/client.h"
#include "transfer/options.h"

namespace gfrep::replica::agent {

// An I/O thread of the copies: its io_context runs the copies dealt to it, and its
// SessionCache (used only on that thread) keeps their warm sessions. Declared in this order
// so that the cache goes before the io_context.
struct SiteAgent::CopyIo {
  explicit CopyIo(std::size_t max_idle) : sessions(std::chrono::seconds(20), max_idle) {}
  boost::asio::io_context io;
  transfer::SessionCache sessions;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work{
      io.get_executor()};
  std::thread thread;
  int copies = 0;  // running on it now (guarded by SiteAgent::mu_)
  // With pipeline_files: its share of the copies at once, as sessions to one source (guarded
  // by SiteAgent::mu_; 0: it takes no copies now).
  int session_share = 0;
};

// One claimed attempt of a task, shared by its coroutine and running_. The signal is this
// attempt's own (bound to its coroutine), so a cancellation posted as the attempt ended
// reaches nothing.
struct SiteAgent::Running {
  Running(std::uint64_t id, CopyIo& io) : task_id(id), io(io) {}
  std::uint64_t task_id;
  std::string src_node;  // the task's source
  CopyIo& io;
  std::shared_ptr<boost::asio::cancellation_signal> cancel =
      std::make_shared<boost::asio::cancellation_signal>();  // used only on io's thread
  bool cancelled = false;   // guarded by mu_
  bool lease_lost = false;  // guarded by mu_
  // Set once its pull is planned (guarded by mu_): its dashboard counters (received bytes,
  // for StragglerLoop) and its source's site.
  std::shared_ptr<CopyCounters> metered;
  std::string src_site;
  std::string straggler;  // why it was given back as too slow (guarded by mu_; "": it was not)
  // Given back and cancelled in the catalog: no attempt resumes its partial file (guarded by
  // mu_; an older catalog queues the task again instead).
  bool discard_partial = false;
};

// The copy's checked record, source, settings and names (PlanCopy).
struct SiteAgent::PullPlan {
  bool in_place = false;  // an earlier attempt's replica is there and verified: no pull
  catalog::Attributes attrs;
  transfer::Endpoint endpoint;
  std::string src_site;
  std::filesystem::path final_path;
  std::filesystem::path tmp;
  transfer::TransferOptions options;
  std::shared_ptr<CopyCounters> metered;  // ended (meter_.End) when the pull returns
};

}  // namespace gfrep::replica::agent
