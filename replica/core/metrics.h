#pragma once

// Prometheus text exposition (format 0.0.4) for the daemons' /metrics: a builder that writes
// each metric family once (# HELP, # TYPE) followed by its samples, with label values
// escaped. Names follow Prometheus conventions (gfrep_ prefix, _total for counters, base
// units: _bytes, _seconds).
//
// Thread safety: a value; build one per scrape.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace gfrep::replica {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class MetricsText {
 public:
  // One family; call Sample() for its samples before the next family.
  void Family(std::string_view name, std::string_view type, std::string_view help);
  void Sample(std::string_view name, const MetricLabels& labels, double value);
  void Sample(std::string_view name, double value) { Sample(name, {}, value); }

  // Family + one unlabelled sample.
  void Counter(std::string_view name, std::string_view help, double value);
  void Gauge(std::string_view name, std::string_view help, double value);

  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// Label value escaping (\\, \", \n).
std::string EscapeLabelValue(std::string_view value);

inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace gfrep::replica
