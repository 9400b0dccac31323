#pragma once

// The daemons' heap: what the allocator holds, for /metrics, and the one allocator setting
// the daemons run with.
//
// Why the setting: a copy's data streams receive into stripe-unit buffers (up to 4 MiB each,
// transfer/internal/receiver.cc). glibc serves a block that large with its own mmap at first,
// but the first such block freed raises the mmap threshold to its size, so later ones come
// from the arenas, and an arena keeps the high-water mark of a burst of copies as resident
// memory (tests/bench/RESULTS.md, the soak's third hour: one agent's RSS stepped up 9 % and
// stayed). A fixed threshold keeps every block of 256 KiB or more in its own mapping,
// returned to the system when it is freed.
//
// Thread safety: KeepLargeBlocksOutOfTheArenas() is called once, first thing in main(),
// before any other thread starts; the rest may be called from any thread.

#include <cstdint>

namespace gfrep::replica {

class MetricsText;

// Blocks at or above this size get their own mapping.
inline constexpr std::uint64_t kOwnMappingFrom = 256 * 1024;

// mallopt(M_MMAP_THRESHOLD, kOwnMappingFrom), which also stops glibc's dynamic threshold.
// Returns false when the allocator refused the setting (or is not glibc's).
bool KeepLargeBlocksOutOfTheArenas();

struct HeapFigures {
  std::uint64_t in_use_bytes = 0;  // allocated and not freed: arenas plus own mappings
  std::uint64_t mapped_bytes = 0;  // the part of in_use in blocks with their own mapping
  std::uint64_t free_bytes = 0;    // freed but kept by the arenas (resident or not)
};

// All arenas summed (mallinfo2); zeros where the allocator does not say (sanitizers).
HeapFigures ReadHeap();

// gfrep_process_heap_{in_use,mapped,free}_bytes.
void AppendHeapMetrics(MetricsText& m);

}  // namespace gfrep::replica
