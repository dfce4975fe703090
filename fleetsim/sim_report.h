// The report of a simulated run: the policies' results side by side, as a fixed-width
// table for people and as JSON for machines.
//
// The first result is the reference (Peregrine in peregrine-sim): each row also shows its
// ETTR and its total time lost divided by the first row's. The JSON carries the job shape,
// the cost model and every field of every SimResult, keys in a fixed order, so a run can be
// reproduced and two runs diffed. Pure functions of their arguments; thread-compatible.
#ifndef PEREGRINE_FLEETSIM_SIM_REPORT_H_
#define PEREGRINE_FLEETSIM_SIM_REPORT_H_

#include <string>
#include <vector>

#include "fleetsim/cost_model.h"
#include "fleetsim/sim_result.h"

namespace peregrine::fleetsim {

// One line describing the job, a header, one line per result and a legend. Time lost is
// in hours by cause; mean recovery in seconds ("-" without recoveries); a ratio to the
// first row is "-" where the first row's value is 0.
std::string FormatResultsTable(const JobShape& shape, const std::vector<SimResult>& results);

// {"job": {...}, "costs": {...}, "results": [{...}, ...]}, indented by 2, ending in a
// newline. Each result adds mean_recovery_s (null without recoveries), lost.total_s and
// the two ratios to the first result (null where the first's value is 0).
std::string FormatResultsJson(const JobShape& shape, const CostModel& costs,
                              const std::vector<SimResult>& results);

}  // namespace peregrine::fleetsim

#endif  // PEREGRINE_FLEETSIM_SIM_REPORT_H_
