// GradScaler's diagnostics beyond PyTorch: the scale collapse alarm and where its warnings go,
// the overflow report, and the history of (scale, skipped) written as CSV.
#include "halfgrad/amp/grad_scaler.h"

#include <cstdio>
#include <utility>

#include "halfgrad/amp/grad_scaler_detail.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/text_file.h"

namespace hg::amp {

namespace detail {

std::string skips_alarm(int64_t skips, double scale) {
  return fmt::format(
      "{} iterations in a row skipped their optimizer step because a gradient was inf or NaN "
      "(expected a few at the start while the scale comes down, got {}; the scale is now {:g})",
      skips, skips, scale);
}

std::string floor_alarm(double scale, double floor) {
  return fmt::format(
      "the loss scale fell to {:g}, below the floor {:g} (expected it to "
      "settle above it)",
      scale, floor);
}

void print_to_stderr(std::string_view message) {
  std::fprintf(stderr, "halfgrad warning: %.*s\n", int(message.size()), message.data());
}

}  // namespace detail

void GradScaler::check_collapse(bool skipped) {
  consecutive_skips_ = skipped ? consecutive_skips_ + 1 : 0;
  std::string alarm;
  if (options_.alarm_after_consecutive_skips > 0 &&
      consecutive_skips_ == options_.alarm_after_consecutive_skips) {
    alarm = detail::skips_alarm(consecutive_skips_, get_scale());
  }
  if (options_.alarm_scale_floor) {
    const double scale = get_scale();
    if (scale < *options_.alarm_scale_floor && !below_floor_) {
      below_floor_ = true;
      if (alarm.empty()) alarm = detail::floor_alarm(scale, *options_.alarm_scale_floor);
    } else if (scale >= *options_.alarm_scale_floor) {
      below_floor_ = false;
    }
  }
  if (alarm.empty()) return;
  raise_alarm(alarm);
}

void GradScaler::raise_alarm(const std::string& what) {
  const std::string alarm = fmt::format(
      "GradScaler: {}. The loss or the gradients are likely non-finite for a reason no loss "
      "scale fixes. Try: bfloat16 instead of float16 (amp::Autocast with kBFloat16 needs no "
      "loss scaling); a lower learning rate; the op that overflows in float32 "
      "(amp::OverflowWatch names it, scaler.overflow_report(optimizer, &model) names the "
      "parameters whose gradients overflowed); checking the data for NaN "
      "(autograd::DetectAnomalyGuard finds the op that made the first one)",
      what);
  if (options_.alarm_action == GradScalerOptions::AlarmAction::kError) HG_ERROR("{}", alarm);
  warning_handler_(alarm);
}

void GradScaler::set_warning_handler(std::function<void(std::string_view)> handler) {
  warning_handler_ =
      handler ? std::move(handler) : std::function<void(std::string_view)>(detail::print_to_stderr);
}

OverflowReport GradScaler::overflow_report(const optim::Optimizer& optimizer,
                                           const nn::Module* model) const {
  return amp::overflow_report(optimizer, model);
}

void GradScaler::write_history_csv(const std::string& path) const {
  std::string text = "step,scale,skipped\n";
  for (const HistoryEntry& entry : history_) {
    text += fmt::format("{},{},{}\n", entry.step, entry.scale, entry.skipped ? 1 : 0);
  }
  write_text_file(path, text, "GradScaler.write_history_csv");
}

}  // namespace hg::amp
