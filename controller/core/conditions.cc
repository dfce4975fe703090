#include "controller/core/conditions.h"

namespace peregrine {

bool SetCondition(JobStatus& st, const std::string& type, bool value, const std::string& reason,
                  const std::string& message, int64_t generation, int64_t now) {
  const ConditionStatus status = value ? ConditionStatus::kTrue : ConditionStatus::kFalse;
  for (Condition& c : st.conditions) {
    if (c.type != type) continue;
    const bool changed = c.status != status || c.reason != reason || c.message != message ||
                         c.observed_generation != generation;
    if (c.status != status) c.last_transition_time = now;
    c.status = status;
    c.reason = reason;
    c.message = message;
    c.observed_generation = generation;
    return changed;
  }
  st.conditions.push_back(Condition{type, status, reason, message, generation, now});
  return true;
}

const Condition* FindCondition(const JobStatus& st, const std::string& type) {
  for (const Condition& c : st.conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

}  // namespace peregrine
