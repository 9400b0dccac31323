// copy SRC DST [STREAMS] [KEY_FILE]: copies one file between a local path and a gfsited agent,
// or between two agents (gf://HOST:PORT/PATH), with the gfrep library; prints the rate.
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "transfer/auth.h"
#include "transfer/copy.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SRC DST [STREAMS] [KEY_FILE]\n", argv[0]);
    return 2;
  }
  gfrep::transfer::TransferOptions options;
  options.route.streams = argc > 3 ? std::atoi(argv[3]) : 8;
  std::filesystem::path key_file = argc > 4 ? argv[4] : gfrep::transfer::DefaultKeyPath();
  absl::StatusOr<std::string> key = gfrep::transfer::LoadOrCreateSharedKey(key_file);
  if (!key.ok()) {
    std::fprintf(stderr, "copy: %s\n", key.status().ToString().c_str());
    return 1;
  }
  options.shared_key = *key;

  absl::StatusOr<gfrep::transfer::TransferStats> stats =
      gfrep::transfer::Copy(argv[1], argv[2], options);
  if (!stats.ok()) {
    std::fprintf(stderr, "copy: %s\n", stats.status().ToString().c_str());
    return 1;
  }
  double seconds = stats->seconds > 0 ? stats->seconds : 1e-9;
  std::printf("copied %llu bytes in %.3f s: %.1f MB/s over %d streams\n",
              static_cast<unsigned long long>(stats->bytes), stats->seconds,
              static_cast<double>(stats->bytes_transferred) / seconds / 1e6, stats->streams);
  return 0;
}
