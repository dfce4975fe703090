#include "controller/core/pod_health.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "controller/core/conditions.h"

namespace peregrine {

void FailStuckStandbys(const JobStatus& status, int64_t now, int64_t timeout_ns, std::vector<PodObservation>& pods) {
  std::set<std::string> standbys;
  for (const StandbyStatus& s : status.standbys) standbys.insert(s.pod);
  for (PodObservation& p : pods) {
    if (p.running || p.failed || p.waiting_reason.empty() || p.created_at <= 0 || !standbys.count(p.name)) continue;
    const int64_t pending = now - p.created_at;
    if (pending < timeout_ns) continue;
    p.failed = true;
    p.reason = absl::StrCat("stuck Pending for ",
                            absl::FormatDuration(absl::Trunc(absl::Nanoseconds(pending), absl::Seconds(1))), ": ",
                            p.waiting_reason);
    p.machine_id.clear();
  }
}

std::string StuckPodsMessage(const std::vector<PodObservation>& pods) {
  constexpr int kMaxListed = 5;
  std::vector<std::string> parts;
  int more = 0;
  for (const PodObservation& p : pods) {
    if (p.waiting_reason.empty()) continue;
    if (static_cast<int>(parts.size()) < kMaxListed) {
      parts.push_back(absl::StrCat(p.name, ": ", p.waiting_reason));
    } else {
      ++more;
    }
  }
  std::string out = absl::StrJoin(parts, "; ");
  if (more > 0) absl::StrAppend(&out, "; and ", more, " more");
  return out;
}

void UpdatePodsStuckCondition(const std::vector<PodObservation>& pods, int64_t generation, int64_t now,
                              JobStatus& status) {
  const std::string message = StuckPodsMessage(pods);
  if (message.empty()) {
    SetCondition(status, kPodsStuckCondition, false, "NoStuckPods", "no pod of the job is stuck", generation, now);
    return;
  }
  // The reason is the first stuck pod's ("<pod>: <Reason> ...").
  const size_t start = message.find(": ") + 2;
  const std::string reason = message.substr(start, message.find_first_of(" :;", start) - start);
  SetCondition(status, kPodsStuckCondition, true, reason, message, generation, now);
}

}  // namespace peregrine
