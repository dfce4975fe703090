// The job's record of the cordons Peregrine made (JobStatus::cordons): what node health
// management needs to undo each one (the node, and whether Peregrine or someone else
// cordoned it first), why, when and for which incident. Bounded: the newest
// kMaxCordonRecords are kept, older ones are counted in JobStatus::cordons_dropped.
//
// Pure functions on the status; thread-compatible.
#ifndef PEREGRINE_CONTROLLER_CORE_CORDONS_H_
#define PEREGRINE_CONTROLLER_CORE_CORDONS_H_

#include <cstddef>
#include <cstdint>

#include "controller/core/job_state.h"

namespace peregrine {

inline constexpr size_t kMaxCordonRecords = 64;

// Records that `request`'s machine was cordoned at `now`. `already_cordoned`: the node
// was unschedulable before Peregrine's cordon (someone else's), so the record says
// by_peregrine false and it must never be undone by Peregrine. The same node and incident
// are recorded once (a repeated quarantine). Drops the oldest beyond kMaxCordonRecords,
// counting them.
void RecordCordon(const QuarantineRequest& request, bool already_cordoned, int64_t now, JobStatus& status);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_CORDONS_H_
