#pragma once

// HttpGet: one HTTP/1.1 request to a daemon's web port (Boost.Beast client), for tests of
// /metrics, /healthz, /readyz and the dashboard's API.

#include <string>

#include "absl/status/statusor.h"

namespace gfrep::testing {

struct HttpReply {
  int status = 0;
  std::string content_type;
  std::string content_length;  // as sent (HEAD answers have one but no body)
  std::string cache_control;
  std::string body;
};

// `method` "GET", "HEAD", "POST"; `extra_header` (if not empty) is sent as X-Big (a
// request-size test). kUnavailable if it cannot connect or read.
absl::StatusOr<HttpReply> HttpGet(const std::string& host_port, const std::string& target,
                                  const std::string& method = "GET", const std::string& extra_header = "");

// A free loopback TCP port (bound, then released), for a daemon whose address must stay the
// same across a restart.
int FreeLoopbackPort();

// The value of the sample `name` (with its labels as written, e.g. `x{a="b"}`) in a
// Prometheus text exposition; -1 if absent.
double MetricValue(const std::string& text, const std::string& name);

}  // namespace gfrep::testing
