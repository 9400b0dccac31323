#include "netprobe/wan_emulator.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include "netprobe/internal/ip_packet.h"
#include "netprobe/internal/link_scheduler.h"
#include "netprobe/internal/packet_ring.h"

namespace gfrep::netprobe {
namespace {

using internal::LinkScheduler;
using internal::PacketRing;
using internal::Verdict;

// Packets read from one device per wakeup before the other device gets its turn.
constexpr int kReadBatch = 64;

absl::Status ErrnoError(std::string_view context, int err) {
  std::string message = fmt::format("{}: {}", context, std::strerror(err));
  if (err == EPERM || err == EACCES) return absl::PermissionDeniedError(message);
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EBUSY || err == EEXIST) return absl::AlreadyExistsError(message);
  return absl::InternalError(message);
}

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

std::int64_t NowNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string NetnsPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  return "/run/netns/" + name;
}

// Creates TUN device `device` in namespace `netns` (empty: ours) with `mtu`, up.
absl::StatusOr<UniqueFd> OpenTun(const std::string& netns, const std::string& device, int mtu) {
  UniqueFd home;
  if (!netns.empty()) {
    home = UniqueFd(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!home.valid()) return ErrnoError("open /proc/self/ns/net", errno);
    UniqueFd target(::open(NetnsPath(netns).c_str(), O_RDONLY | O_CLOEXEC));
    if (!target.valid()) return ErrnoError(fmt::format("open namespace {}", netns), errno);
    if (::setns(target.get(), CLONE_NEWNET) != 0) {
      return ErrnoError(fmt::format("setns {}", netns), errno);
    }
  }
  // Whatever happens below, return to our own namespace.
  auto result = [&]() -> absl::StatusOr<UniqueFd> {
    UniqueFd fd(::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC));
    if (!fd.valid()) return ErrnoError("open /dev/net/tun", errno);
    ifreq ifr{};
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    std::memcpy(ifr.ifr_name, device.data(), device.size());
    if (::ioctl(fd.get(), TUNSETIFF, &ifr) != 0) {
      return ErrnoError(fmt::format("create TUN device {} in {}", device, netns), errno);
    }
    UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!sock.valid()) return ErrnoError("socket", errno);
    ifr.ifr_mtu = mtu;
    if (::ioctl(sock.get(), SIOCSIFMTU, &ifr) != 0) {
      return ErrnoError(fmt::format("set MTU {} on {}", mtu, device), errno);
    }
    // A long transmit queue so bursts from the kernel wait for us instead of being dropped.
    ifr.ifr_qlen = 10000;
    if (::ioctl(sock.get(), SIOCSIFTXQLEN, &ifr) != 0) {
      return ErrnoError(fmt::format("set txqueuelen on {}", device), errno);
    }
    if (::ioctl(sock.get(), SIOCGIFFLAGS, &ifr) != 0) {
      return ErrnoError(fmt::format("get flags of {}", device), errno);
    }
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
    if (::ioctl(sock.get(), SIOCSIFFLAGS, &ifr) != 0) {
      return ErrnoError(fmt::format("bring {} up", device), errno);
    }
    return fd;
  }();
  if (home.valid() && ::setns(home.get(), CLONE_NEWNET) != 0) {
    // We cannot safely continue in a foreign namespace.
    spdlog::critical("cannot return to the original network namespace: {}", std::strerror(errno));
    std::abort();
  }
  return result;
}

std::size_t DelayLineBytes(const DirectionOptions& options) {
  // Everything that can be in flight: the queue plus a propagation delay's worth at line
  // rate, doubled for record headers of small packets, plus slack. Untouched pages cost
  // nothing, so generosity is cheap.
  constexpr std::size_t kMax = std::size_t{1} << 30;
  if (options.rate_bps == 0) return std::size_t{256} << 20;
  const double delay_s = std::chrono::duration<double>(options.delay).count();
  const double line = static_cast<double>(options.rate_bps) / 8.0 * delay_s;
  const double total = 2.0 * (line + static_cast<double>(EffectiveQueueBytes(options))) +
                       static_cast<double>(std::size_t{4} << 20);
  return std::min(kMax, static_cast<std::size_t>(total));
}

class TunEmulator final : public WanEmulator {
 public:
  TunEmulator(const EmulatorOptions& options, UniqueFd fd_a, UniqueFd fd_b)
      : logger_(options.logger ? options.logger : spdlog::default_logger()),
        fd_a_(std::move(fd_a)),
        fd_b_(std::move(fd_b)),
        a_to_b_(options.a_to_b, options.seed * 2 + 1, fd_a_.get(), fd_b_.get()),
        b_to_a_(options.b_to_a, options.seed * 2 + 2, fd_b_.get(), fd_a_.get()),
        buffer_(internal::kMaxPacketBytes + 1) {}

  absl::Status Run(const std::function<void(const EmulatorStats&)>& on_report) override;
  EmulatorStats stats() const override {
    return {a_to_b_.stats, b_to_a_.stats, wakeups_};
  }

 private:
  struct Direction {
    Direction(const DirectionOptions& options, std::uint64_t seed, int in, int out)
        : scheduler(options, seed), ring(DelayLineBytes(options)), in_fd(in), out_fd(out) {}
    LinkScheduler scheduler;
    PacketRing ring;
    DirectionStats stats;
    int in_fd;
    int out_fd;
  };

  absl::Status ReadBatch(Direction& d);
  static void Deliver(Direction& d, std::int64_t now);

  std::shared_ptr<spdlog::logger> logger_;
  UniqueFd fd_a_;
  UniqueFd fd_b_;
  Direction a_to_b_;
  Direction b_to_a_;
  std::vector<std::uint8_t> buffer_;
  std::uint64_t wakeups_ = 0;
};

absl::Status TunEmulator::ReadBatch(Direction& d) {
  const std::int64_t now = NowNs();
  for (int i = 0; i < kReadBatch; ++i) {
    const ssize_t n = ::read(d.in_fd, buffer_.data(), buffer_.size());
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      return ErrnoError("read TUN device", errno);
    }
    const std::span<const std::uint8_t> packet(buffer_.data(), static_cast<std::size_t>(n));
    ++d.stats.packets_in;
    d.stats.bytes_in += packet.size();
    if (!internal::CheckIpPacket(packet).ok()) {
      ++d.stats.dropped_malformed;
      continue;
    }
    const internal::Decision decision = d.scheduler.Offer(now, packet.size());
    if (decision.verdict == Verdict::kDropLoss) {
      ++d.stats.dropped_loss;
    } else if (decision.verdict == Verdict::kDropQueue) {
      ++d.stats.dropped_queue;
    } else if (!d.ring.Push(decision.deliver_ns, packet)) {
      ++d.stats.dropped_nobuf;
    }
  }
  return absl::OkStatus();
}

void TunEmulator::Deliver(Direction& d, std::int64_t now) {
  while (!d.ring.empty() && d.ring.FrontDeliverNs() <= now) {
    const std::span<const std::uint8_t> packet = d.ring.Front();
    if (::write(d.out_fd, packet.data(), packet.size()) == static_cast<ssize_t>(packet.size())) {
      ++d.stats.forwarded;
      d.stats.bytes_forwarded += packet.size();
    } else {
      ++d.stats.dropped_write;
    }
    d.ring.Pop();
  }
}

absl::Status TunEmulator::Run(const std::function<void(const EmulatorStats&)>& on_report) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);
  if (::pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0) {
    return absl::InternalError("pthread_sigmask failed");
  }
  UniqueFd signal_fd(::signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC));
  UniqueFd timer_fd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  UniqueFd epoll_fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!signal_fd.valid() || !timer_fd.valid() || !epoll_fd.valid()) {
    return ErrnoError("signalfd/timerfd/epoll_create1", errno);
  }
  enum : std::uint32_t { kTunA, kTunB, kTimer, kSignal };
  const std::array<std::pair<int, std::uint32_t>, 4> watched = {
      {{fd_a_.get(), kTunA}, {fd_b_.get(), kTunB}, {timer_fd.get(), kTimer},
       {signal_fd.get(), kSignal}}};
  for (const auto& [fd, tag] : watched) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = tag;
    if (::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      return ErrnoError("epoll_ctl", errno);
    }
  }
  logger_->info("emulator running");
  std::int64_t armed_ns = -1;
  for (;;) {
    std::array<epoll_event, 8> events{};
    const int n = ::epoll_wait(epoll_fd.get(), events.data(), events.size(), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("epoll_wait", errno);
    }
    ++wakeups_;
    for (int i = 0; i < n; ++i) {
      switch (events[i].data.u32) {
        case kTunA:
          if (absl::Status s = ReadBatch(a_to_b_); !s.ok()) return s;
          break;
        case kTunB:
          if (absl::Status s = ReadBatch(b_to_a_); !s.ok()) return s;
          break;
        case kTimer: {
          std::uint64_t expirations = 0;
          (void)!::read(timer_fd.get(), &expirations, sizeof expirations);  // ignored: only wakes us
          armed_ns = -1;
          break;
        }
        case kSignal: {
          signalfd_siginfo info{};
          while (::read(signal_fd.get(), &info, sizeof info) == sizeof info) {
            if (info.ssi_signo == SIGUSR1) {
              if (on_report) on_report(stats());
            } else {
              logger_->info("emulator stopping on signal {}", info.ssi_signo);
              return absl::OkStatus();
            }
          }
          break;
        }
        default:
          break;
      }
    }
    const std::int64_t now = NowNs();
    Deliver(a_to_b_, now);
    Deliver(b_to_a_, now);
    std::int64_t next = -1;
    for (const Direction* d : {&a_to_b_, &b_to_a_}) {
      if (!d->ring.empty() && (next < 0 || d->ring.FrontDeliverNs() < next)) {
        next = d->ring.FrontDeliverNs();
      }
    }
    if (next != armed_ns) {
      itimerspec spec{};
      if (next >= 0) {
        spec.it_value.tv_sec = next / 1'000'000'000;
        spec.it_value.tv_nsec = next % 1'000'000'000;
      }
      if (::timerfd_settime(timer_fd.get(), TFD_TIMER_ABSTIME, &spec, nullptr) != 0) {
        return ErrnoError("timerfd_settime", errno);
      }
      armed_ns = next;
    }
  }
}

bool ValidDeviceName(const std::string& name) {
  if (name.empty() || name.size() >= IFNAMSIZ) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_' || c == '.';
  });
}

}  // namespace

absl::Status Validate(const EmulatorOptions& options) {
  for (const std::string* name : {&options.device_a, &options.device_b}) {
    if (!ValidDeviceName(*name)) {
      return absl::InvalidArgumentError(fmt::format(
          "device name '{}' must be 1-15 characters of [A-Za-z0-9._-]", *name));
    }
  }
  if (options.netns_a == options.netns_b && options.device_a == options.device_b) {
    return absl::InvalidArgumentError(
        "both sides are in the same namespace: the device names must differ");
  }
  if (options.mtu < 576 || options.mtu > 65535) {
    return absl::InvalidArgumentError(fmt::format("mtu must be within [576, 65535], got {}",
                                                  options.mtu));
  }
  if (absl::Status s = Validate(options.a_to_b); !s.ok()) {
    return absl::InvalidArgumentError(fmt::format("a->b: {}", std::string(s.message())));
  }
  if (absl::Status s = Validate(options.b_to_a); !s.ok()) {
    return absl::InvalidArgumentError(fmt::format("b->a: {}", std::string(s.message())));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WanEmulator>> WanEmulator::Create(const EmulatorOptions& options) {
  if (absl::Status s = Validate(options); !s.ok()) return s;
  absl::StatusOr<UniqueFd> fd_a = OpenTun(options.netns_a, options.device_a, options.mtu);
  if (!fd_a.ok()) return fd_a.status();
  absl::StatusOr<UniqueFd> fd_b = OpenTun(options.netns_b, options.device_b, options.mtu);
  if (!fd_b.ok()) return fd_b.status();
  return std::unique_ptr<WanEmulator>(
      new TunEmulator(options, std::move(*fd_a), std::move(*fd_b)));
}

}  // namespace gfrep::netprobe

namespace gfrep::netprobe {

std::string StatsToJson(const EmulatorStats& stats, std::uint64_t generation) {
  auto direction = [](const DirectionStats& d) {
    return fmt::format(
        "{{\"packets_in\": {}, \"bytes_in\": {}, \"forwarded\": {}, \"bytes_forwarded\": {}, "
        "\"dropped_queue\": {}, \"dropped_loss\": {}, \"dropped_malformed\": {}, "
        "\"dropped_nobuf\": {}, \"dropped_write\": {}}}",
        d.packets_in, d.bytes_in, d.forwarded, d.bytes_forwarded, d.dropped_queue, d.dropped_loss,
        d.dropped_malformed, d.dropped_nobuf, d.dropped_write);
  };
  return fmt::format("{{\"generation\": {}, \"a_to_b\": {}, \"b_to_a\": {}, \"wakeups\": {}}}",
                     generation, direction(stats.a_to_b), direction(stats.b_to_a), stats.wakeups);
}

}  // namespace gfrep::netprobe
