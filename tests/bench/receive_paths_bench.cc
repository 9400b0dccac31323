// What a receiver pays per GB for three ways of landing TCP bytes in the destination file,
// without the engine around them (issue 13: choose the receive path by measurement):
//   buffer  recv into a 4 MiB buffer, then pwrite at the block's offset (the engine today)
//   map     recv straight into a MAP_SHARED mapping of the destination (populated for
//           writing first), no pwrite
//   splice  socket -> pipe -> destination (no copy through user space)
// each with or without an XXH3-64 pass over every block (from the buffer, the mapping, or for
// splice a read-only mapping of the landed block): the engine must check each block.
// A forked sender sendfile()s the page-cached source over loopback TCP; the figures are the
// receiving process's own CPU (getrusage) and its wall-clock rate.
//
//   build/bin/receive_paths_bench SOURCE DEST_DIR [ROUNDS]     (SOURCE: a page-cached file)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr std::size_t kBlock = 4 << 20;
#ifndef MADV_POPULATE_READ
constexpr int MADV_POPULATE_READ = 22;
#endif
#ifndef MADV_POPULATE_WRITE
constexpr int MADV_POPULATE_WRITE = 23;
#endif

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "receive_paths_bench: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

void RecvAll(int s, unsigned char* p, std::size_t n) {
  for (std::size_t got = 0; got < n;) {
    const ssize_t r = recv(s, p + got, n - got, MSG_WAITALL);
    if (r <= 0) Die("recv");
    got += static_cast<std::size_t>(r);
  }
}

std::uint64_t HashLanded(int fd, std::size_t off, std::size_t n) {
  void* m = mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(off));
  if (m == MAP_FAILED) Die("mmap");
  madvise(m, n, MADV_POPULATE_READ);
  const std::uint64_t h = XXH3_64bits(m, n);
  munmap(m, n);
  return h;
}

// One copy of `src_fd` (size bytes) into `dst` the way `mode` says.
void Run(int src_fd, std::size_t size, const std::string& dst, const std::string& mode, bool hash) {
  const int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (l < 0 || bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l, 1) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    Die("loopback listener");
  }
  const pid_t child = fork();
  if (child < 0) Die("fork");
  if (child == 0) {
    const int c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) _exit(1);
    off_t off = 0;
    while (static_cast<std::size_t>(off) < size) {
      if (sendfile(c, src_fd, &off, size - static_cast<std::size_t>(off)) <= 0) _exit(1);
    }
    close(c);
    _exit(0);
  }
  const int s = accept(l, nullptr, nullptr);
  if (s < 0) Die("accept");
  const int d = open(dst.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (d < 0) Die("open " + dst);
  const double c0 = CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t h = 0;
  if (mode == "buffer") {
    std::vector<unsigned char> b(kBlock);
    for (std::size_t off = 0; off < size; off += kBlock) {
      const std::size_t n = std::min(kBlock, size - off);
      RecvAll(s, b.data(), n);
      if (hash) h ^= XXH3_64bits(b.data(), n);
      if (pwrite(d, b.data(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) Die("pwrite");
    }
  } else if (mode == "map") {
    if (ftruncate(d, static_cast<off_t>(size)) != 0) Die("ftruncate");
    for (std::size_t off = 0; off < size; off += kBlock) {
      const std::size_t n = std::min(kBlock, size - off);
      void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, d, static_cast<off_t>(off));
      if (m == MAP_FAILED) Die("mmap");
      if (madvise(m, n, MADV_POPULATE_WRITE) != 0) Die("MADV_POPULATE_WRITE");
      RecvAll(s, static_cast<unsigned char*>(m), n);
      if (hash) h ^= XXH3_64bits(m, n);
      munmap(m, n);
    }
  } else {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) Die("pipe");
    fcntl(p[0], F_SETPIPE_SZ, 1 << 20);
    for (std::size_t off = 0; off < size; off += kBlock) {
      const std::size_t n = std::min(kBlock, size - off);
      for (std::size_t got = 0; got < n;) {
        const ssize_t r = splice(s, nullptr, p[1], nullptr, n - got, SPLICE_F_MOVE | SPLICE_F_MORE);
        if (r <= 0) Die("splice from the socket");
        loff_t o = static_cast<loff_t>(off + got);
        for (ssize_t w = 0; w < r;) {
          const ssize_t k = splice(p[0], nullptr, d, &o, static_cast<std::size_t>(r - w), SPLICE_F_MOVE);
          if (k <= 0) Die("splice into the file");
          w += k;
        }
        got += static_cast<std::size_t>(r);
      }
      if (hash) h ^= HashLanded(d, off, n);
    }
    close(p[0]);
    close(p[1]);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = CpuSeconds() - c0;
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    errno = EIO;
    Die("the sender failed");
  }
  std::printf("| %s | %s | %.0f | %.2f |\n", mode.c_str(), hash ? "xxh3-64" : "none",
              static_cast<double>(size) / secs / 1e6, cpu / (static_cast<double>(size) / 1e9));
  std::fflush(stdout);
  (void)h;
  close(d);
  close(s);
  close(l);
  unlink(dst.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: receive_paths_bench SOURCE DEST_DIR [ROUNDS]\n");
    return 2;
  }
  const int src = open(argv[1], O_RDONLY | O_CLOEXEC);
  if (src < 0) Die(std::string("open ") + argv[1]);
  struct stat st {};
  if (fstat(src, &st) != 0 || st.st_size <= 0) Die("source size");
  const std::string dst = std::string(argv[2]) + "/receive_paths_bench.out";
  const int rounds = argc > 3 ? std::max(1, std::atoi(argv[3])) : 1;
  std::printf("| path | block check | MB/s | receiver CPU s/GB |\n|---|---|---:|---:|\n");
  for (int r = 0; r < rounds; ++r) {
    for (const char* mode : {"buffer", "map", "splice"}) {
      for (bool hash : {false, true}) Run(src, static_cast<std::size_t>(st.st_size), dst, mode, hash);
    }
  }
  return 0;
}
