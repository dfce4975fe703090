#include "controller/core/cordons.h"

#include <algorithm>

namespace peregrine {

void RecordCordon(const QuarantineRequest& request, bool already_cordoned, int64_t now, JobStatus& status) {
  if (request.machine_id.empty()) return;
  // One record per node and incident: the executor records a cordon once it succeeded,
  // and a status write that failed after it repeats the quarantine in the next round.
  const bool known = std::any_of(status.cordons.begin(), status.cordons.end(), [&](const CordonRecord& c) {
    return c.node == request.machine_id && c.incident_id == request.incident_id;
  });
  if (known) return;
  CordonRecord record;
  record.node = request.machine_id;
  record.reason = request.reason;
  record.at = now;
  record.incident_id = request.incident_id;
  record.by_peregrine = !already_cordoned;
  status.cordons.push_back(std::move(record));
  if (status.cordons.size() > kMaxCordonRecords) {
    const size_t drop = status.cordons.size() - kMaxCordonRecords;
    status.cordons.erase(status.cordons.begin(), status.cordons.begin() + static_cast<long>(drop));
    status.cordons_dropped += drop;
  }
}

}  // namespace peregrine
