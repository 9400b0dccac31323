// replica/core/heap.h: the daemons' allocator setting and the heap figures on /metrics.

#include "replica/core/heap.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "replica/core/metrics.h"

namespace gfrep::replica {
namespace {

// The sanitizers bring their own allocator: mallopt and mallinfo2 say nothing of it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kGlibcAllocator = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kGlibcAllocator = false;
#else
constexpr bool kGlibcAllocator = true;
#endif
#else
constexpr bool kGlibcAllocator = true;
#endif

// A stripe unit's buffer as a copy's stream uses it: allocated, written, freed.
void UseABlock(std::size_t size) {
  std::unique_ptr<unsigned char[]> b = std::make_unique_for_overwrite<unsigned char[]>(size);
  std::memset(b.get(), 0x5a, size);
  // Keep the writes (and the allocation) from being optimised away.
  volatile unsigned char sink = b[size - 1];
  (void)sink;
}

TEST(HeapTest, FreedStripeUnitBuffersAreNotKeptByTheArenas) {
  if (!kGlibcAllocator) GTEST_SKIP() << "a sanitizer's allocator";
  ASSERT_TRUE(KeepLargeBlocksOutOfTheArenas());
  constexpr std::size_t kBlock = 4 << 20;
  // glibc's own default: the first 4 MiB block freed would raise the mmap threshold to 4 MiB,
  // and every later one would come from an arena and stay there when freed.
  UseABlock(kBlock);
  const HeapFigures before = ReadHeap();
  for (int i = 0; i < 8; ++i) UseABlock(kBlock);
  const HeapFigures after = ReadHeap();
  EXPECT_LT(after.free_bytes, before.free_bytes + kBlock / 4)
      << "freed 4 MiB blocks stayed in the arenas: " << before.free_bytes << " -> "
      << after.free_bytes << " bytes free";
  EXPECT_LT(after.in_use_bytes, before.in_use_bytes + kBlock / 4);
}

TEST(HeapTest, ABlockHeldIsCountedInUseAndMapped) {
  if (!kGlibcAllocator) GTEST_SKIP() << "a sanitizer's allocator";
  ASSERT_TRUE(KeepLargeBlocksOutOfTheArenas());
  constexpr std::size_t kBlock = 32 << 20;
  const HeapFigures before = ReadHeap();
  std::unique_ptr<unsigned char[]> held = std::make_unique_for_overwrite<unsigned char[]>(kBlock);
  std::memset(held.get(), 1, kBlock);
  const HeapFigures during = ReadHeap();
  EXPECT_GE(during.in_use_bytes, before.in_use_bytes + kBlock);
  EXPECT_GE(during.mapped_bytes, before.mapped_bytes + kBlock);
  held.reset();
  const HeapFigures after = ReadHeap();
  EXPECT_LT(after.mapped_bytes, during.mapped_bytes - kBlock / 2);
}

TEST(HeapTest, TheFiguresAreOnMetrics) {
  MetricsText m;
  AppendHeapMetrics(m);
  for (const char* name : {"gfrep_process_heap_in_use_bytes", "gfrep_process_heap_mapped_bytes",
                           "gfrep_process_heap_free_bytes"}) {
    EXPECT_NE(m.text().find(std::string("# TYPE ") + name + " gauge"), std::string::npos)
        << name << " missing from\n" << m.text();
  }
  if (kGlibcAllocator) {
    EXPECT_EQ(m.text().find("gfrep_process_heap_in_use_bytes 0\n"), std::string::npos)
        << "a process with a heap reports none in use";
  }
}

}  // namespace
}  // namespace gfrep::replica
