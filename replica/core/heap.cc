#include "replica/core/heap.h"

#include <malloc.h>

#include "replica/core/metrics.h"

namespace gfrep::replica {

bool KeepLargeBlocksOutOfTheArenas() {
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(kOwnMappingFrom)) == 1;
}

HeapFigures ReadHeap() {
  const struct mallinfo2 mi = mallinfo2();
  HeapFigures f;
  f.mapped_bytes = mi.hblkhd;
  f.in_use_bytes = mi.uordblks + mi.hblkhd;
  f.free_bytes = mi.fordblks;
  return f;
}

void AppendHeapMetrics(MetricsText& m) {
  const HeapFigures f = ReadHeap();
  m.Gauge("gfrep_process_heap_in_use_bytes",
          "Bytes allocated and not freed (glibc arenas plus blocks with their own mapping)",
          static_cast<double>(f.in_use_bytes));
  m.Gauge("gfrep_process_heap_mapped_bytes",
          "Bytes allocated in blocks with their own mapping (returned when freed)",
          static_cast<double>(f.mapped_bytes));
  m.Gauge("gfrep_process_heap_free_bytes", "Bytes freed but kept by the glibc arenas",
          static_cast<double>(f.free_bytes));
}

}  // namespace gfrep::replica
