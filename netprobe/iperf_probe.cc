#include "netprobe/iperf_probe.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

extern "C" {
#include <iperf_api.h>
}

namespace gfrep::netprobe {

namespace {

using Json = nlohmann::json;

// Owns one iperf_test; its report (the JSON text libiperf would print) goes to /dev/null:
// the caller reads the JSON string from the test instead.
class IperfTest {
 public:
  IperfTest() : t_(iperf_new_test()) {
    if (t_ != nullptr && iperf_defaults(t_) != 0) {
      iperf_free_test(t_);
      t_ = nullptr;
    }
    if (t_ != nullptr) iperf_set_test_logfile(t_, "/dev/null");
  }
  ~IperfTest() {
    if (t_ != nullptr) iperf_free_test(t_);
  }
  IperfTest(const IperfTest&) = delete;
  IperfTest& operator=(const IperfTest&) = delete;
  iperf_test* get() const { return t_; }

 private:
  iperf_test* t_;
};

std::uint64_t ReadUint(const char* path) {
  std::ifstream in(path);
  std::uint64_t v = 0;
  if (!(in >> v)) return 0;
  return v;
}

}  // namespace

absl::Status RunIperfServer(const std::string& bind_host, int port, int timeout_s) {
  IperfTest test;
  if (test.get() == nullptr) return absl::InternalError("libiperf: cannot create a test");
  iperf_set_test_role(test.get(), 's');
  iperf_set_test_server_port(test.get(), port);
  if (!bind_host.empty()) iperf_set_test_bind_address(test.get(), bind_host.c_str());
  iperf_set_test_one_off(test.get(), 1);
  iperf_set_test_json_output(test.get(), 1);
  // No test that ends within the time: the process ends (default action of SIGALRM).
  ::alarm(static_cast<unsigned>(std::max(1, timeout_s)));
  int rc = iperf_run_server(test.get());
  ::alarm(0);
  if (rc < 0) {
    return absl::UnavailableError(fmt::format("iperf3 server on port {}: {}", port, iperf_strerror(i_errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<IperfResult> RunIperfClient(const IperfClientOptions& o) {
  if (o.streams < 1 || o.streams > 64) return absl::InvalidArgumentError("streams must be 1..64");
  if (o.seconds < 1 || o.seconds > 60) return absl::InvalidArgumentError("seconds must be 1..60");
  if (o.omit_seconds < 0 || o.omit_seconds > 10) return absl::InvalidArgumentError("omit must be 0..10 s");
  if (o.window > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError("window too large");
  }
  std::string last_error;
  for (int attempt = 0; attempt < std::max(1, o.connect_attempts); ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    IperfTest test;
    if (test.get() == nullptr) return absl::InternalError("libiperf: cannot create a test");
    iperf_set_test_role(test.get(), 'c');
    iperf_set_test_server_hostname(test.get(), o.host.c_str());
    iperf_set_test_server_port(test.get(), o.port);
    iperf_set_test_reverse(test.get(), 1);
    iperf_set_test_num_streams(test.get(), o.streams);
    iperf_set_test_duration(test.get(), o.seconds);
    iperf_set_test_omit(test.get(), o.omit_seconds);
    if (o.window > 0) iperf_set_test_socket_bufsize(test.get(), static_cast<int>(o.window));
    std::string cc = o.congestion;
    if (!cc.empty()) iperf_set_test_congestion_control(test.get(), cc.data());
    iperf_set_test_json_output(test.get(), 1);
    if (iperf_run_client(test.get()) < 0) {
      const int err = i_errno;
      last_error = iperf_strerror(err);
      if (err == IECONNECT) continue;  // the server is not listening yet
      return absl::InternalError(fmt::format("iperf3 to {}:{}: {}", o.host, o.port, last_error));
    }
    const char* text = iperf_get_test_json_output_string(test.get());
    if (text == nullptr) return absl::InternalError("iperf3 produced no report");
    Json j = Json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.contains("end")) return absl::InternalError("iperf3 report is not JSON");
    if (j.contains("error")) {
      return absl::InternalError(fmt::format("iperf3: {}", j["error"].get<std::string>()));
    }
    const Json& end = j["end"];
    IperfResult r;
    r.streams = o.streams;
    const Json received = end.value("sum_received", Json::object());
    const Json sent = end.value("sum_sent", Json::object());
    r.seconds = received.value("seconds", 0.0);
    r.bytes = received.value("bytes", std::uint64_t{0});
    r.bits_per_second = received.value("bits_per_second", 0.0);
    r.retransmits = sent.value("retransmits", std::uint64_t{0});
    r.congestion = end.value("sender_tcp_congestion", std::string());
    // The rate from the per-second intervals this end received, omitted ones left out: the
    // end-of-test sum read up to 15 % above the emulator's rate in 2-s runs (demo, 13:31).
    std::uint64_t interval_bytes = 0;
    double interval_seconds = 0;
    for (const Json& iv : j.value("intervals", Json::array())) {
      const Json sum = iv.value("sum", Json::object());
      if (sum.value("omitted", false)) continue;
      interval_bytes += sum.value("bytes", std::uint64_t{0});
      interval_seconds += sum.value("seconds", 0.0);
    }
    if (interval_seconds > 0.5) {
      r.bytes = interval_bytes;
      r.seconds = interval_seconds;
      r.bits_per_second = static_cast<double>(interval_bytes) * 8 / interval_seconds;
    }
    if (r.seconds <= 0) return absl::InternalError("iperf3 report has no measured time");
    return r;
  }
  return absl::UnavailableError(fmt::format("iperf3 server {}:{} not reachable: {}", o.host, o.port, last_error));
}

absl::StatusOr<double> MeasureConnectRtt(const std::string& host, int port, int samples) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(fmt::format("{}: {}", host, gai_strerror(rc)));
  }
  double best = -1;
  std::string error;
  for (int i = 0; i < std::max(1, samples); ++i) {
    int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
    auto t1 = std::chrono::steady_clock::now();
    if (rc != 0) error = std::strerror(errno);
    ::close(fd);
    if (rc != 0) continue;
    double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    if (best < 0 || ms < best) best = ms;
  }
  ::freeaddrinfo(res);
  if (best < 0) return absl::UnavailableError(fmt::format("connect {}:{}: {}", host, port, error));
  return best;
}

std::uint64_t KernelMaxSocketBuffer() {
  return std::min(ReadUint("/proc/sys/net/core/rmem_max"), ReadUint("/proc/sys/net/core/wmem_max"));
}

std::string ToJson(const IperfResult& r) {
  return Json{{"streams", r.streams},       {"seconds", r.seconds},
              {"bytes", r.bytes},           {"bits_per_second", r.bits_per_second},
              {"retransmits", r.retransmits}, {"congestion", r.congestion}}
      .dump();
}

absl::StatusOr<IperfResult> IperfResultFromJson(const std::string& text) {
  Json j = Json::parse(text, nullptr, false);
  auto bad = [] { return absl::InvalidArgumentError("malformed probe result"); };
  if (!j.is_object()) return bad();
  IperfResult r;
  try {
    r.streams = j.at("streams").get<int>();
    r.seconds = j.at("seconds").get<double>();
    r.bytes = j.at("bytes").get<std::uint64_t>();
    r.bits_per_second = j.at("bits_per_second").get<double>();
    r.retransmits = j.at("retransmits").get<std::uint64_t>();
    r.congestion = j.at("congestion").get<std::string>();
  } catch (const Json::exception&) {
    return bad();
  }
  if (r.streams < 1 || r.seconds <= 0 || r.bits_per_second < 0) return bad();
  return r;
}

}  // namespace gfrep::netprobe
