#include "replica/core/metrics.h"

#include <fmt/format.h>

#include <cmath>

namespace gfrep::replica {

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

void MetricsText::Family(std::string_view name, std::string_view type, std::string_view help) {
  text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void MetricsText::Sample(std::string_view name, const MetricLabels& labels, double value) {
  text_ += name;
  if (!labels.empty()) {
    text_ += '{';
    for (std::size_t i = 0; i < labels.size(); ++i) {
      text_ += fmt::format("{}{}=\"{}\"", i == 0 ? "" : ",", labels[i].first, EscapeLabelValue(labels[i].second));
    }
    text_ += '}';
  }
  if (std::isnan(value)) {
    text_ += " NaN\n";
  } else if (value == std::floor(value) && std::fabs(value) < 1e15) {
    text_ += fmt::format(" {}\n", static_cast<std::int64_t>(value));
  } else {
    text_ += fmt::format(" {}\n", value);
  }
}

void MetricsText::Counter(std::string_view name, std::string_view help, double value) {
  Family(name, "counter", help);
  Sample(name, value);
}

void MetricsText::Gauge(std::string_view name, std::string_view help, double value) {
  Family(name, "gauge", help);
  Sample(name, value);
}

}  // namespace gfrep::replica
