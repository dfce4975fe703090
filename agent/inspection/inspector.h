// Inspector: runs each Inspection at its own interval and turns results into alarms when
// they cross the inspection's trigger threshold. The agent's control loop calls
// Poll(now) with its clock; the Inspector reads no clock itself, so tests drive it with
// synthetic times.
//
// Alarm rule, per (kind, component): a WARNING or FAULT result counts as "bad"; after
// `trigger_after` consecutive bad runs an alarm is emitted once (the result itself), and
// again only if the status worsens (WARNING -> FAULT) or after the component has been
// seen healthy (OK) again. A machine-attributed FAULT alarms at once, regardless of
// trigger_after (high-confidence evidence: the controller evicts immediately). OK,
// NOT_PRESENT and ERROR never alarm (ERROR is the inspection's own failure).
//
// Not thread-safe: one control loop owns it.
#ifndef PEREGRINE_AGENT_INSPECTION_INSPECTOR_H_
#define PEREGRINE_AGENT_INSPECTION_INSPECTOR_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "agent/inspection/inspection.h"
#include "agent/inspection/inspection_result.h"

namespace peregrine {

struct InspectionSchedule {
  absl::Duration interval = absl::Seconds(10);
  int trigger_after = 1;  // consecutive bad runs before an alarm (tolerates auto-recovery)
};

struct InspectorPoll {
  std::vector<InspectionResult> results;  // of the inspections that ran in this poll
  std::vector<InspectionResult> alarms;   // threshold crossings in this poll
};

class Inspector {
 public:
  // Adds an inspection; it first runs at the first Poll. PEREGRINE_CHECKs a positive
  // interval and trigger_after >= 1.
  void Add(std::unique_ptr<Inspection> inspection, InspectionSchedule schedule);

  // Runs every inspection due at `now` (its last run + interval <= now).
  InspectorPoll Poll(absl::Time now);

  // The latest result of every (kind, component), ordered by kind then component: what
  // the agent puts in its heartbeat.
  std::vector<InspectionResult> Latest() const;

  // The earliest time an inspection is due; InfiniteFuture with none.
  absl::Time NextDue() const;

 private:
  struct Entry {
    std::unique_ptr<Inspection> inspection;
    InspectionSchedule schedule;
    absl::Time next_due = absl::InfinitePast();
  };
  struct ComponentState {
    InspectionResult latest;
    int consecutive_bad = 0;
    int alarmed_severity = 0;  // severity of the last alarm; 0 = armed
  };

  std::vector<Entry> entries_;
  std::map<std::pair<std::string, std::string>, ComponentState> components_;
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_INSPECTION_INSPECTOR_H_
