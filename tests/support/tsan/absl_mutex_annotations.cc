// ThreadSanitizer annotations for Debian's absl::Mutex and absl::CondVar (linked into every
// program of a -DGFREP_SANITIZE=thread build; see the top-level CMakeLists.txt).
//
// Why: Debian's libabsl_synchronization is not built with -fsanitize=thread, so its lock and
// unlock carry none of the __tsan_mutex_* annotations Abseil adds under TSan, and TSan sees
// no happens-before edge through an absl::Mutex: every field guarded by one (the catalog's,
// gRPC's, and replica/ and transfer/ as they move to ABSL_GUARDED_BY) would be reported as a
// race. Here the program itself defines the Mutex and CondVar members that lock, unlock and
// wait; the dynamic linker binds every call (ours, and gRPC's through its PLT) to these, and
// each calls the library's own (dlsym RTLD_NEXT) between the annotations Abseil's TSan build
// makes. Waits that release and re-take the lock inside the library (Await*, CondVar::Wait*)
// are annotated as an unlock before and a lock after; a Condition evaluated inside the library
// runs with TSan's access checks off (missed races there, never false ones).
//
// Only for the sanitizer build; a release build never compiles this file.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"

extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);

namespace {

template <typename Fn>
Fn Real(const char* mangled) {
  void* f = ::dlsym(RTLD_NEXT, mangled);
  if (f == nullptr) {
    std::fprintf(stderr, "tsan absl annotations: %s not found in libabsl_synchronization\n",
                 mangled);
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

// The library's symbols (namespace absl::debian3, Debian 12's Abseil 20220623).
#define GFREP_REAL(type, mangled)         \
  static const auto real = Real<type>(mangled)

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Time;

constexpr unsigned kRead = __tsan_mutex_read_lock;
constexpr unsigned kTry = __tsan_mutex_try_lock;
constexpr unsigned kTryFailed = __tsan_mutex_try_lock_failed;

void Acquired(void* mu, unsigned flags) {
  __tsan_mutex_pre_lock(mu, flags);
  __tsan_mutex_post_lock(mu, flags, 0);
}
void Releasing(void* mu, unsigned flags) {
  __tsan_mutex_pre_unlock(mu, flags);
  __tsan_mutex_post_unlock(mu, flags);
}
// Inside a wait the library evaluates our Condition while it holds the lock on TSan's books
// as released: ignore those accesses.
void IgnoreBegin() {
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
  AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
}
void IgnoreEnd() {
  AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
}

// How many of these wrappers this thread is inside. The library calls its own exported
// functions through the PLT (AwaitWithTimeout calls AwaitWithDeadline), which reach the
// wrappers again: only the outermost one annotates (a nested one released the mutex twice
// on TSan's books: "unlock of an unlocked mutex").
thread_local int depth = 0;
struct Outer {
  Outer() : outer(depth++ == 0) {}
  ~Outer() { --depth; }
  Outer(const Outer&) = delete;
  Outer& operator=(const Outer&) = delete;
  const bool outer;
};

// A lock operation with a Condition: the library evaluates it (our code) before returning.
template <typename Call>
auto LockWith(void* mu, unsigned flags, Call call) {
  Outer o;
  if (!o.outer) return call();
  __tsan_mutex_pre_lock(mu, flags);
  IgnoreBegin();
  auto r = call();
  IgnoreEnd();
  __tsan_mutex_post_lock(mu, flags, 0);
  return r;
}

// A wait that releases and re-takes `mu` (held exclusively) inside the library.
template <typename Call>
auto WaitOn(void* mu, Call call) {
  Outer o;
  if (!o.outer) return call();
  Releasing(mu, 0);
  IgnoreBegin();
  auto r = call();
  IgnoreEnd();
  Acquired(mu, 0);
  return r;
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  GFREP_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  Outer o;
  if (!o.outer) return real(this);
  __tsan_mutex_pre_lock(this, 0);
  real(this);
  __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::Unlock() {
  GFREP_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  Outer o;
  if (!o.outer) return real(this);
  __tsan_mutex_pre_unlock(this, 0);
  // Unlock may evaluate waiters' Conditions (our code) on this thread.
  IgnoreBegin();
  real(this);
  IgnoreEnd();
  __tsan_mutex_post_unlock(this, 0);
}

bool Mutex::TryLock() {
  GFREP_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  Outer o;
  if (!o.outer) return real(this);
  __tsan_mutex_pre_lock(this, kTry);
  const bool ok = real(this);
  __tsan_mutex_post_lock(this, kTry | (ok ? 0 : kTryFailed), 0);
  return ok;
}

void Mutex::ReaderLock() {
  GFREP_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  Outer o;
  if (!o.outer) return real(this);
  __tsan_mutex_pre_lock(this, kRead);
  real(this);
  __tsan_mutex_post_lock(this, kRead, 0);
}

void Mutex::ReaderUnlock() {
  GFREP_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  Outer o;
  if (!o.outer) return real(this);
  __tsan_mutex_pre_unlock(this, kRead);
  IgnoreBegin();
  real(this);
  IgnoreEnd();
  __tsan_mutex_post_unlock(this, kRead);
}

bool Mutex::ReaderTryLock() {
  GFREP_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  Outer o;
  if (!o.outer) return real(this);
  __tsan_mutex_pre_lock(this, kRead | kTry);
  const bool ok = real(this);
  __tsan_mutex_post_lock(this, kRead | kTry | (ok ? 0 : kTryFailed), 0);
  return ok;
}

void Mutex::LockWhen(const Condition& cond) {
  GFREP_REAL(void (*)(Mutex*, const Condition&), "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  LockWith(this, 0, [&] { real(this, cond); return 0; });
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  GFREP_REAL(void (*)(Mutex*, const Condition&),
             "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  LockWith(this, kRead, [&] { real(this, cond); return 0; });
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  GFREP_REAL(bool (*)(Mutex*, const Condition&, Duration),
             "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return LockWith(this, 0, [&] { return real(this, cond, timeout); });
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  GFREP_REAL(bool (*)(Mutex*, const Condition&, Time),
             "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return LockWith(this, 0, [&] { return real(this, cond, deadline); });
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  GFREP_REAL(bool (*)(Mutex*, const Condition&, Duration),
             "_ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return LockWith(this, kRead, [&] { return real(this, cond, timeout); });
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  GFREP_REAL(bool (*)(Mutex*, const Condition&, Time),
             "_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return LockWith(this, kRead, [&] { return real(this, cond, deadline); });
}

void Mutex::Await(const Condition& cond) {
  GFREP_REAL(void (*)(Mutex*, const Condition&), "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  WaitOn(this, [&] { real(this, cond); return 0; });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  GFREP_REAL(bool (*)(Mutex*, const Condition&, Duration),
             "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return WaitOn(this, [&] { return real(this, cond, timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  GFREP_REAL(bool (*)(Mutex*, const Condition&, Time),
             "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return WaitOn(this, [&] { return real(this, cond, deadline); });
}

void CondVar::Wait(Mutex* mu) {
  GFREP_REAL(void (*)(CondVar*, Mutex*), "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  WaitOn(mu, [&] { real(this, mu); return 0; });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  GFREP_REAL(bool (*)(CondVar*, Mutex*, Duration),
             "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  return WaitOn(mu, [&] { return real(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  GFREP_REAL(bool (*)(CondVar*, Mutex*, Time),
             "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  return WaitOn(mu, [&] { return real(this, mu, deadline); });
}

ABSL_NAMESPACE_END
}  // namespace absl
