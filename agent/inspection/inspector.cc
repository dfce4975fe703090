#include "agent/inspection/inspector.h"

#include <algorithm>

#include "diagnosis/check.h"

namespace peregrine {

void Inspector::Add(std::unique_ptr<Inspection> inspection, InspectionSchedule schedule) {
  PEREGRINE_CHECK(inspection != nullptr);
  PEREGRINE_CHECK(schedule.interval > absl::ZeroDuration()) << inspection->kind();
  PEREGRINE_CHECK(schedule.trigger_after >= 1) << inspection->kind();
  entries_.push_back({std::move(inspection), schedule, absl::InfinitePast()});
}

InspectorPoll Inspector::Poll(absl::Time now) {
  InspectorPoll poll;
  for (Entry& e : entries_) {
    if (e.next_due > now) continue;
    e.next_due = now + e.schedule.interval;
    for (InspectionResult& r : e.inspection->Run(now)) {
      ComponentState& state = components_[{r.kind, r.component}];
      const int severity = InspectionSeverity(r.status);
      if (severity > 0) {
        ++state.consecutive_bad;
        const bool immediate = r.status == InspectionOutcome::kFault && r.machine_attributed;
        if ((state.consecutive_bad >= e.schedule.trigger_after || immediate) &&
            severity > state.alarmed_severity) {
          state.alarmed_severity = severity;
          poll.alarms.push_back(r);
        }
      } else if (r.status == InspectionOutcome::kOk) {
        state.consecutive_bad = 0;
        state.alarmed_severity = 0;
      }
      // NOT_PRESENT and ERROR leave the counters as they are.
      state.latest = r;
      poll.results.push_back(std::move(r));
    }
  }
  return poll;
}

std::vector<InspectionResult> Inspector::Latest() const {
  std::vector<InspectionResult> out;
  out.reserve(components_.size());
  for (const auto& [key, state] : components_) out.push_back(state.latest);
  return out;
}

absl::Time Inspector::NextDue() const {
  absl::Time next = absl::InfiniteFuture();
  for (const Entry& e : entries_) next = std::min(next, e.next_due);
  return next;
}

}  // namespace peregrine
