#include "replica/in_flight.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace gfrep::replica {

InFlightLimit::InFlightLimit(InFlightOptions options) : o_(options) {
  o_.min = std::max(1, o_.min);
  o_.max = std::max(o_.min, o_.max);
  o_.step = std::max(1.0, o_.step);
  o_.gain = std::max(1.0, o_.gain);
  o_.hold = std::max(1, o_.hold);
  limit_ = std::clamp(o_.start, o_.min, o_.max);
}

int InFlightLimit::Grown() const {
  const int grown = static_cast<int>(std::ceil(limit_ * o_.step));
  return std::min(o_.max, std::max(limit_ + 1, grown));
}

int InFlightLimit::Update(double goodput, bool limited) {
  reason_.clear();
  const int was = limit_;
  auto hold_at = [&](int l, double measured) {
    limit_ = l;
    phase_ = Phase::kHold;
    hold_left_ = o_.hold;
    held_goodput_ = measured;
  };
  auto probe = [&] {
    if (limit_ >= o_.max) {
      hold_at(limit_, goodput);
      return;
    }
    before_limit_ = limit_;
    before_goodput_ = goodput;
    limit_ = Grown();
    phase_ = Phase::kSettle;
  };
  switch (phase_) {
    case Phase::kMeasure:
      if (limited) probe();
      if (limit_ != was) {
        reason_ = fmt::format("probing: {:.0f} Mbit/s at {}", goodput * 8 / 1e6, was);
      }
      break;
    case Phase::kSettle:
      phase_ = Phase::kJudge;
      break;
    case Phase::kJudge:
      if (!limited) {
        phase_ = Phase::kMeasure;  // demand fell below the limit: this probe says nothing
      } else if (goodput >= before_goodput_ * o_.gain) {
        const double before = before_goodput_;
        probe();  // it helped: keep it and try more
        reason_ = fmt::format("goodput {:.0f} -> {:.0f} Mbit/s", before * 8 / 1e6, goodput * 8 / 1e6);
      } else {
        reason_ = fmt::format("goodput {:.0f} -> {:.0f} Mbit/s, not {:.0f} % more; back",
                              before_goodput_ * 8 / 1e6, goodput * 8 / 1e6, (o_.gain - 1) * 100);
        hold_at(before_limit_, 0);
      }
      break;
    case Phase::kHold:
      if (limited) {
        if (held_goodput_ == 0) {
          held_goodput_ = goodput;
        } else if (goodput < held_goodput_ / 2) {
          const int lower = std::max(o_.min, static_cast<int>(std::floor(limit_ / o_.step)));
          reason_ = fmt::format("goodput fell {:.0f} -> {:.0f} Mbit/s at the same limit",
                                held_goodput_ * 8 / 1e6, goodput * 8 / 1e6);
          hold_at(lower, 0);
          break;
        }
      }
      if (--hold_left_ <= 0) phase_ = Phase::kMeasure;
      break;
  }
  return limit_;
}

}  // namespace gfrep::replica
