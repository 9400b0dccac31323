#pragma once

// Reads a file's bytes in place, from a read-only mapping of its page cache, instead of
// copying them into a buffer with pread: the sender hashes each block (block checksum and
// end-to-end checksum) from the mapping and then hands the same pages to the socket with
// sendfile, so a page-cached source costs no copy in user space at all.
//
// A mapped file that shrinks under the reader raises SIGBUS on the first access past its new
// end. MapAndVisit turns that into kAborted ("shrank while it was read"): a process-wide
// SIGBUS handler (installed once, the first time; it passes every other SIGBUS to the
// handler that was there before, or to the default action) jumps back out of the visit when
// the fault lies in the calling thread's current window. So `visit` must not hold resources
// that need a destructor, nor allocate (it is left by a jump when the file shrinks, maybe in
// the middle of a copy into a buffer it just allocated): it should only hash, or copy into
// memory that its caller owns and keeps.
//
// Thread safety: any number of threads may call MapAndVisit at once (the window is per
// thread).

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace gfrep::transfer::internal {

// Calls visit(ctx, data, n) on [offset, offset + length) of `fd` in pieces of at most
// `piece` bytes, in file order, from a read-only shared mapping. kAborted if the file ended
// before offset + length (shrank); kUnavailable if the file cannot be mapped (e.g. a file
// system without mmap): the caller then reads with pread.
using VisitFn = void (*)(void* ctx, const unsigned char* data, std::size_t n);
absl::Status MapAndVisit(int fd, std::uint64_t offset, std::uint64_t length, std::size_t piece,
                         VisitFn visit, void* ctx);

// How many MapAndVisit calls in this process visited a mapping to its end (tests: which path
// a sender took).
std::uint64_t MappedVisits();

}  // namespace gfrep::transfer::internal
