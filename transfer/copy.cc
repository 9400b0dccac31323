#include "transfer/copy.h"

#include <fmt/format.h>

#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "transfer/internal/engine.h"
#include "transfer/internal/pull.h"

namespace gfrep::transfer {

namespace asio = boost::asio;

namespace {

// What a (source, destination) pair asks for.
struct Plan {
  enum class Kind { kPush, kPull, kThirdParty };
  Kind kind = Kind::kPush;
  std::filesystem::path local;  // kPush: the source; kPull: the destination
  GfUrl src;                    // kPull, kThirdParty
  GfUrl dst;                    // kPush, kThirdParty
};

absl::StatusOr<Plan> MakePlan(std::string_view source, std::string_view destination) {
  const bool src_remote = IsGfUrl(source);
  const bool dst_remote = IsGfUrl(destination);
  if (!src_remote && !dst_remote) {
    return absl::InvalidArgumentError(
        "one of SRC and DST must be a gf://HOST:PORT/PATH URL (use cp for local copies)");
  }
  Plan plan;
  if (src_remote) {
    absl::StatusOr<GfUrl> s = ParseGfUrl(source);
    if (!s.ok()) return s.status();
    plan.src = std::move(*s);
  } else {
    if (source.empty()) return absl::InvalidArgumentError("empty source path");
    plan.local = std::filesystem::path(std::string(source));
  }
  if (dst_remote) {
    absl::StatusOr<GfUrl> d = ParseGfUrl(destination);
    if (!d.ok()) return d.status();
    plan.dst = std::move(*d);
  } else {
    if (destination.empty()) return absl::InvalidArgumentError("empty destination path");
    plan.local = std::filesystem::path(std::string(destination));
  }
  plan.kind = src_remote && dst_remote ? Plan::Kind::kThirdParty
              : src_remote             ? Plan::Kind::kPull
                                       : Plan::Kind::kPush;
  return plan;
}

// The pull of `plan` into a local file: a directory gets the source's file name; the partial
// file and journal live in `<dir>/.gfrep-tmp/`, removed when no other partial copy is left.
asio::awaitable<absl::StatusOr<TransferStats>> PullToLocal(Plan plan, TransferOptions options) {
  std::filesystem::path local = plan.local;
  std::error_code ec;
  if (std::filesystem::is_directory(local, ec)) {
    local /= std::filesystem::path(plan.src.path).filename();
  }
  std::filesystem::path abs = std::filesystem::absolute(local, ec);
  if (ec)
    co_return absl::InvalidArgumentError(
        fmt::format("destination {}: {}", local.string(), ec.message()));
  std::filesystem::path tmp = abs.parent_path() / ".gfrep-tmp";
  absl::StatusOr<TransferStats> result = co_await internal::PullFile(
      plan.src.endpoint, plan.src.path, abs, tmp, std::move(options), false, "", nullptr);
  std::filesystem::remove(tmp, ec);  // only succeeds when empty (no other partial copies)
  co_return result;
}

// The whole copy, as a coroutine on the caller's executor. Cancellable (terminal, through
// the co_spawn's cancellation slot): ends with kCancelled, never throws.
asio::awaitable<absl::StatusOr<TransferStats>> RunCopy(std::string source, std::string destination,
                                                       TransferOptions options) {
  absl::StatusOr<Plan> plan = MakePlan(source, destination);
  if (!plan.ok()) co_return plan.status();
  if (absl::Status s = Validate(options); !s.ok()) co_return s;
  switch (plan->kind) {
    case Plan::Kind::kPush:
      co_return co_await internal::PushFile(plan->local, plan->dst.endpoint, plan->dst.path,
                                            std::move(options));
    case Plan::Kind::kPull:
      co_return co_await PullToLocal(std::move(*plan), std::move(options));
    case Plan::Kind::kThirdParty:
      co_return co_await internal::ThirdPartyFile(plan->src.endpoint, plan->src.path,
                                                  plan->dst.endpoint, plan->dst.path,
                                                  std::move(options));
  }
  co_return absl::InternalError("bug: unknown copy kind");
}

absl::StatusOr<TransferStats> FromCompletion(std::exception_ptr e,
                                             absl::StatusOr<TransferStats> r) {
  if (e) return absl::InternalError("bug: exception escaped the copy");
  return r;
}

}  // namespace

absl::StatusOr<TransferStats> Copy(std::string_view source, std::string_view destination,
                                   const TransferOptions& options) {
  asio::io_context io;
  std::optional<absl::StatusOr<TransferStats>> result;
  asio::co_spawn(io, RunCopy(std::string(source), std::string(destination), options),
                 [&result](std::exception_ptr e, absl::StatusOr<TransferStats> r) {
                   result = FromCompletion(e, std::move(r));
                 });
  io.run();
  return std::move(*result);
}

// One copy on its own io_context and thread. The io_context, the signal and the thread are
// constant after StartCopy; the signal is emitted on the io_context's thread only.
struct CopyHandle::State {
  asio::io_context io;
  asio::cancellation_signal cancel;
  std::thread thread;
  std::atomic<bool> done{false};
  absl::Mutex mu;
  std::optional<absl::StatusOr<TransferStats>> result ABSL_GUARDED_BY(mu);
};

CopyHandle::CopyHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}
CopyHandle::CopyHandle(CopyHandle&&) noexcept = default;

CopyHandle& CopyHandle::operator=(CopyHandle&& other) noexcept {
  if (this != &other) {
    CopyHandle old(std::move(*this));  // cancels and waits for the copy we held
    state_ = std::move(other.state_);
  }
  return *this;
}

CopyHandle::~CopyHandle() {
  if (state_ == nullptr) return;  // moved from
  Cancel();
  if (!state_->thread.joinable()) return;
  if (state_->thread.get_id() == std::this_thread::get_id()) {
    // Destroyed from options.progress, on the copy's own thread: it cannot join itself; the
    // thread holds the state and ends with the (cancelled) copy.
    state_->thread.detach();
    return;
  }
  state_->thread.join();
}

absl::StatusOr<TransferStats> CopyHandle::Wait() {
  if (state_ == nullptr) return absl::FailedPreconditionError("CopyHandle was moved from");
  absl::MutexLock lock(&state_->mu);
  state_->mu.Await(absl::Condition(
      +[](std::optional<absl::StatusOr<TransferStats>>* r) { return r->has_value(); },
      &state_->result));
  return *state_->result;
}

void CopyHandle::Cancel() {
  if (state_ == nullptr || Done()) return;
  // After the copy ended nothing runs the io_context any more: the posted emit is dropped
  // with it, harmlessly.
  State* s = state_.get();
  asio::post(s->io, [s] { s->cancel.emit(asio::cancellation_type::terminal); });
}

bool CopyHandle::Done() const { return state_ != nullptr && state_->done.load(); }

CopyHandle StartCopy(std::string_view source, std::string_view destination,
                     TransferOptions options) {
  auto state = std::make_shared<CopyHandle::State>();
  CopyHandle::State* s = state.get();
  asio::co_spawn(s->io, RunCopy(std::string(source), std::string(destination), std::move(options)),
                 asio::bind_cancellation_slot(
                     s->cancel.slot(), [s](std::exception_ptr e, absl::StatusOr<TransferStats> r) {
                       absl::MutexLock lock(&s->mu);  // Await wakes when it unlocks
                       s->result = FromCompletion(e, std::move(r));
                       s->done.store(true);
                     }));
  // The thread holds the state too: a handle destroyed on this very thread detaches it.
  s->thread = std::thread([keep = state] { keep->io.run(); });
  return CopyHandle(std::move(state));
}

}  // namespace gfrep::transfer
