#include "replica/agent/in_flight.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace gfrep::replica::agent {

InFlightLimit::InFlightLimit(InFlightOptions options) : o_(options) {
  o_.min = std::max(1, o_.min);
  o_.max = std::max(o_.min, o_.max);
  o_.step = std::max(1.0, o_.step);
  o_.gain = std::max(1.0, o_.gain);
  o_.fine_step = std::max(1.0, o_.fine_step);
  o_.hold = std::max(1, o_.hold);
  o_.max_hold = std::max(o_.hold, o_.max_hold);
  limit_ = std::clamp(o_.start, o_.min, o_.max);
}

void InFlightLimit::Restart(int start) {
  limit_ = std::clamp(start, o_.min, o_.max);
  phase_ = Phase::kWarmup;
  climbing_ = true;
  failures_ = 0;
  before_limit_ = 0;
  before_goodput_ = 0;
  before_congested_ = false;
  held_goodput_ = 0;
  low_periods_ = 0;
  level_goodput_ = 0;
  overfull_periods_ = 0;
  overfull_grace_ = 0;
  full_ = false;
  hold_left_ = 0;
  reason_.clear();
}

int InFlightLimit::Grown() const {
  const int grown = static_cast<int>(std::ceil(limit_ * (climbing_ ? o_.step : o_.fine_step)));
  return std::min(Max(), std::max(limit_ + 1, grown));
}

bool InFlightLimit::Congested(const InFlightSample& s) const {
  return s.loss > o_.max_loss || s.rtt_inflation > o_.max_rtt_inflation;
}

int InFlightLimit::Update(const InFlightSample& sample) {
  reason_.clear();
  ceiling_ = sample.ceiling;
  const double goodput = sample.goodput;
  const bool limited = sample.limited;
  const bool congested = Congested(sample);
  // A standing queue at the bottleneck: the route is full at this L. The figures come with
  // the copies that ended in the period; a period in which none ended (large files) keeps
  // the last verdict.
  const bool figures = sample.rtt_inflation > 0;
  if (figures) {
    full_ = sample.min_rtt_ms >= o_.full_min_rtt_ms &&
            sample.rtt_inflation >= o_.full_rtt_inflation;
  }
  const bool full = full_;
  const int was = limit_;
  auto mbit = [](double bytes_per_s) { return bytes_per_s * 8 / 1e6; };
  auto hold_at = [&](int l, double measured, int periods) {
    limit_ = l;
    phase_ = Phase::kHold;
    hold_left_ = periods;
    held_goodput_ = measured;
    low_periods_ = 0;
    // The copies started at the old L run for a while and their figures still show it.
    overfull_periods_ = 0;
    overfull_grace_ = 2;
  };
  auto probe = [&] {
    if (limit_ >= Max()) {
      hold_at(limit_, goodput, o_.hold);
      return;
    }
    before_limit_ = limit_;
    before_goodput_ = goodput;
    before_congested_ = congested;
    limit_ = Grown();
    phase_ = Phase::kSettle;
  };
  // The probe made a clean path congested: its gain would not last.
  auto vetoed = [&] { return congested && !before_congested_; };
  auto congestion_text = [&] {
    return fmt::format("{:.2f} % re-sent, RTT x{:.2f}", sample.loss * 100, sample.rtt_inflation);
  };
  auto keep = [&] {
    // It helped: keep it, and probe again once the new level holds (the new copies'
    // slow start may still be adding goodput).
    failures_ = 0;
    phase_ = Phase::kMeasure;
    level_goodput_ = goodput;
    reason_ = fmt::format("goodput {:.0f} -> {:.0f} Mbit/s at {}: kept", mbit(before_goodput_),
                          mbit(goodput), limit_);
  };
  // Bytes re-sent with a standing queue for two periods in a row (periods without figures
  // neither count nor break the run): L's bytes overflow the bottleneck (a burst that
  // started too high, a route that got slower); fewer copies. A queue alone is not enough
  // (a deep buffer, another's traffic), nor loss alone (a lossy route).
  auto overfull = [&] {
    if (!figures) return false;
    if (overfull_grace_ > 0) {
      --overfull_grace_;
      return false;
    }
    if (!(sample.loss > o_.max_loss && full && limit_ > o_.min)) {
      overfull_periods_ = 0;
      return false;
    }
    if (++overfull_periods_ < 2) return false;
    const int lower = std::max(o_.min, static_cast<int>(std::floor(limit_ / o_.step)));
    reason_ = fmt::format("congestion at {} for two periods ({})", limit_, congestion_text());
    climbing_ = false;
    hold_at(lower, 0, o_.hold);
    return true;
  };
  auto undo = [&](std::string why) {
    climbing_ = false;
    ++failures_;
    const int periods = std::min(o_.max_hold, o_.hold << std::min(failures_ - 1, 20));
    reason_ = fmt::format("{}; holding {} periods", why, periods);
    hold_at(before_limit_, 0, periods);
  };
  switch (phase_) {
    case Phase::kWarmup:
      phase_ = Phase::kMeasure;  // sessions were still being set up: not a measurement
      level_goodput_ = 0;
      break;
    case Phase::kMeasure: {
      if (!limited) {
        level_goodput_ = 0;  // the copies ran below L: no level of L
        overfull_periods_ = 0;
        break;
      }
      if (overfull()) break;
      // A level: the goodput at L stopped rising (slow start and setup are over).
      const bool level = level_goodput_ > 0 && goodput < level_goodput_ * o_.gain;
      if (level && !full) {
        probe();
        if (limit_ != was)
          reason_ = fmt::format("probing: {:.0f} Mbit/s at {}", mbit(goodput), was);
      } else {
        level_goodput_ = goodput;
      }
      break;
    }
    case Phase::kSettle:
      if (!limited) {
        phase_ = Phase::kMeasure;  // demand fell below the limit: this probe says nothing
        level_goodput_ = 0;
      } else if (vetoed()) {
        undo(fmt::format("congestion at {} ({}); back", limit_, congestion_text()));
      } else if (goodput >= before_goodput_ * o_.gain) {
        keep();  // the gain showed at once
      } else {
        phase_ = Phase::kJudge;
      }
      break;
    case Phase::kJudge:
      if (!limited) {
        phase_ = Phase::kMeasure;
        level_goodput_ = 0;
      } else if (vetoed()) {
        undo(fmt::format("congestion at {} ({}); back", limit_, congestion_text()));
      } else if (goodput >= before_goodput_ * o_.gain) {
        keep();
      } else {
        undo(fmt::format("goodput {:.0f} -> {:.0f} Mbit/s, not {:.0f} % more; back",
                         mbit(before_goodput_), mbit(goodput), (o_.gain - 1) * 100));
      }
      break;
    case Phase::kHold:
      if (!limited) {
        overfull_periods_ = 0;
      } else if (overfull()) {
        break;
      } else {
        if (held_goodput_ == 0) {
          held_goodput_ = goodput;
        } else if (goodput < held_goodput_ / 2 && ++low_periods_ >= 2) {
          // Two periods in a row: one alone is often just files ending together.
          const int lower = std::max(o_.min, static_cast<int>(std::floor(limit_ / o_.step)));
          reason_ = fmt::format("goodput fell {:.0f} -> {:.0f} Mbit/s at the same limit",
                                mbit(held_goodput_), mbit(goodput));
          climbing_ = false;
          hold_at(lower, 0, o_.hold);
          break;
        } else if (goodput >= held_goodput_ / 2) {
          low_periods_ = 0;
          held_goodput_ = (held_goodput_ + goodput) / 2;  // follows the level, smoothly
        }
      }
      if (--hold_left_ <= 0) {
        phase_ = Phase::kMeasure;
        level_goodput_ = held_goodput_;  // the level it held at
      }
      break;
  }
  return limit_;
}

}  // namespace gfrep::replica::agent
