#include "agent/progress_parser.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace peregrine {
namespace {

constexpr std::string_view kMarker = "[peregrine]";

std::optional<double> ParseDouble(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::string copy(text);
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || errno == ERANGE) return std::nullopt;
  return value;
}

}  // namespace

std::optional<ProgressRecord> ParseProgressLine(std::string_view line) {
  size_t at = line.find(kMarker);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(at + kMarker.size());
  ProgressRecord record;
  bool has_step = false;
  for (absl::string_view token :
       absl::StrSplit(absl::string_view(rest.data(), rest.size()), absl::ByAnyChar(" \t\r"), absl::SkipEmpty())) {
    size_t eq = token.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view key(token.data(), eq);
    absl::string_view value = token.substr(eq + 1);
    if (key == "step") {
      uint64_t step = 0;
      if (value.empty() || value[0] == '-' || value[0] == '+' || !absl::SimpleAtoi(value, &step)) {
        return std::nullopt;
      }
      record.step = step;
      has_step = true;
    } else if (key == "loss") {
      record.loss = ParseDouble(std::string_view(value.data(), value.size()));
    } else if (key == "grad_norm") {
      record.grad_norm = ParseDouble(std::string_view(value.data(), value.size()));
    } else if (key == "iter_ms") {
      std::optional<double> ms = ParseDouble(std::string_view(value.data(), value.size()));
      if (ms && *ms >= 0 && *ms == *ms) record.iter_ms = ms;
    } else if (key == "mb") {
      uint32_t mb = 0;
      if (!value.empty() && value[0] != '-' && value[0] != '+' && absl::SimpleAtoi(value, &mb) && mb > 0) {
        record.micro_batches = mb;
      }
    }
  }
  if (!has_step) return std::nullopt;
  return record;
}

void RankProgress::Observe(const ProgressRecord& record, absl::Time now) {
  const bool had = current_.has_progress;
  const uint64_t previous_step = current_.last_completed_step;
  const absl::Time previous_time = current_.last_step_time;
  if (had && record.step == previous_step) {
    // The same step again (a trainer's closing "[peregrine] final step=N ..." line after
    // its step=N line): no new iteration, so the window's count and timing stay as they are.
    if (record.loss) current_.last_loss = *record.loss;
    if (record.grad_norm) current_.last_grad_norm = *record.grad_norm;
    return;
  }

  current_.has_progress = true;
  current_.last_completed_step = record.step;
  if (record.loss) current_.last_loss = *record.loss;
  if (record.grad_norm) current_.last_grad_norm = *record.grad_norm;
  if (record.micro_batches) current_.last_micro_batches = *record.micro_batches;
  current_.last_step_time = now;
  ++current_.steps_in_window;

  if (record.iter_ms) {
    reported_seconds_sum_ += *record.iter_ms / 1000.0;
    ++reported_count_;
  } else {
    all_reported_ = false;
  }
  if (had && record.step > previous_step && now >= previous_time) {
    observed_seconds_sum_ += absl::ToDoubleSeconds(now - previous_time);
    observed_steps_ += record.step - previous_step;
  }
}

ProgressWindow RankProgress::TakeWindow() {
  ProgressWindow window = current_;
  if (window.steps_in_window > 0 && all_reported_ && reported_count_ > 0) {
    window.mean_iteration_seconds = reported_seconds_sum_ / reported_count_;
  } else if (observed_steps_ > 0) {
    window.mean_iteration_seconds = observed_seconds_sum_ / static_cast<double>(observed_steps_);
  } else {
    window.mean_iteration_seconds = 0;
  }
  current_.steps_in_window = 0;
  reported_seconds_sum_ = 0;
  reported_count_ = 0;
  all_reported_ = true;
  observed_seconds_sum_ = 0;
  observed_steps_ = 0;
  return window;
}

}  // namespace peregrine
