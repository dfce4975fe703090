// The command line of peregrine-sim as plain values: the job shape, the cost and fault
// models, the engine's options, the trace file and the output form. Parsing is pure (the
// arguments in, the values or an error naming the flag out); the binary reads the trace
// file and runs the simulation.
//
// Flags: --gpus N, --gpus-per-machine N, --days D, --step-time S, --seed N, --trace FILE,
// --json, --skip-variants, --set=NAME=VALUE (any CostModel or FaultModel field, FailSlowModel fields as
// slow_compute.NAME / slow_link.NAME, and the engine's spare_machines,
// standby_daily_failure_rate, standby_min, resync_s), --help. "--flag value" and
// "--flag=value" are both accepted. Thread-compatible.
#ifndef PEREGRINE_FLEETSIM_SIM_FLAGS_H_
#define PEREGRINE_FLEETSIM_SIM_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fleetsim/cost_model.h"
#include "fleetsim/fault_model.h"
#include "fleetsim/sim_engine.h"

namespace peregrine::fleetsim {

struct SimCommandLine {
  JobShape shape;
  CostModel costs;
  FaultModel faults;
  SimOptions options;  // event_log unused
  std::string trace_path;  // "": faults drawn from `faults`
  bool json = false;
  bool help = false;
  // Only Peregrine and the event-replay baselines (requeue, oracle): the two Peregrine
  // variants, each as costly as Peregrine itself, are left out (for timing runs).
  bool skip_variants = false;
  bool events = false;  // print the peregrine run's events on stderr
};

// The arguments after the program name. InvalidArgumentError naming the flag and what is
// wrong with it (unknown flag, missing or unparsable value, unknown --set field). Ranges
// are checked by Validate* (ValidateJobShape, ValidateCostModel, ValidateFaultModel).
absl::StatusOr<SimCommandLine> ParseSimCommandLine(const std::vector<std::string>& args);

// Sets one --set field; InvalidArgumentError naming it when unknown or not a number.
absl::Status SetSimField(const std::string& name, const std::string& value, SimCommandLine* line);

// The names --set accepts, in a fixed order.
std::vector<std::string> SimFieldNames();

std::string SimUsage();

}  // namespace peregrine::fleetsim

#endif  // PEREGRINE_FLEETSIM_SIM_FLAGS_H_
