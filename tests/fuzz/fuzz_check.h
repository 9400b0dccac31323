#pragma once

// FUZZ_CHECK(condition, why): the assertion of the fuzz targets. Unlike assert() it holds
// in every build, and it says which property broke. A failed check aborts, which libFuzzer
// reports as a crash and saves the input that caused it.

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition, why)                                                         \
  do {                                                                                     \
    if (!(condition)) {                                                                    \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n  (%s)\n", __FILE__, __LINE__, \
                   #condition, why);                                                       \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)
