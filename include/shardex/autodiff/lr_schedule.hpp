// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief `WarmupCosine`: the learning rate of step t, rising linearly over
/// the warm-up steps, then falling along half a cosine to a floor at the last
/// step (GPT-2 and Megatron train so). As a `torch.optim.lr_scheduler.LambdaLR`
/// factor it is `lr(t) / peak`.
///
/// @code
/// WarmupCosine schedule{.peak = 6e-4, .floor = 6e-5, .warmup = 100, .total = 5000};
/// for (std::int64_t t = 0; t < 5000; ++t) {
///   adam.set_lr(schedule(t));   // before the step that t counts from 0
///   ...
/// }
/// @endcode

#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

#include "shardex/core/error.hpp"

namespace shardex {

/// Linear warm-up, then cosine decay to `floor` (designated initializers).
struct WarmupCosine {
  /// The learning rate at the end of the warm-up.
  double peak = 1e-3;
  /// The learning rate at step `total` and after.
  double floor = 0;
  /// Steps of the warm-up: step t < warmup has peak * (t + 1) / warmup.
  std::int64_t warmup = 0;
  /// The step at which the decay reaches `floor`.
  std::int64_t total = 1;

  /// The learning rate of step t (counted from 0); throws on a schedule that
  /// cannot be (negative steps, warm-up past the end, floor above peak).
  [[nodiscard]] double operator()(std::int64_t t) const {
    if (t < 0 || warmup < 0 || total < 1 || warmup > total || !(floor >= 0) || !(peak >= floor) ||
        !std::isfinite(peak))
      throw invalid_argument("shardex::WarmupCosine: step " + std::to_string(t) + " of peak " + std::to_string(peak) +
                             ", floor " + std::to_string(floor) + ", warmup " + std::to_string(warmup) + ", total " +
                             std::to_string(total) +
                             ": needs step >= 0, 0 <= warmup <= total, total >= 1, 0 <= floor <= peak");
    if (t < warmup) return peak * static_cast<double>(t + 1) / static_cast<double>(warmup);
    if (t >= total) return floor;
    const double progress = static_cast<double>(t - warmup) / static_cast<double>(total - warmup);
    return floor + 0.5 * (1 + std::cos(std::numbers::pi * progress)) * (peak - floor);
  }
};

}  // namespace shardex
