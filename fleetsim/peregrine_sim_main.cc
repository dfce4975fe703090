// peregrine-sim: flags -> the job, the costs and the faults (drawn for the seed or read
// from a trace file) -> Peregrine on the real decision core and its baselines on the same
// faults -> a table or JSON on stdout. Bad flags, out-of-range parameters and bad trace
// lines are reported on stderr with exit code 2. Each policy's CPU time is measured here
// (the library has no clocks) into SimResult::sim_cpu_s.
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fleetsim/baselines.h"
#include "fleetsim/fault_model.h"
#include "fleetsim/fault_trace.h"
#include "fleetsim/sim_engine.h"
#include "fleetsim/sim_flags.h"
#include "fleetsim/sim_report.h"

namespace {

using namespace peregrine::fleetsim;

double CpuSeconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

int Fail(const absl::Status& status) {
  std::cerr << "peregrine-sim: " << status.message() << "\n";
  return 2;
}

absl::StatusOr<std::vector<FaultEvent>> LoadFaults(const SimCommandLine& line) {
  if (line.trace_path.empty()) {
    const int fleet = FleetMachines(line.shape, line.options);
    if (absl::Status s = ValidateFaultScope(line.faults, fleet, line.shape.gpus_per_machine, line.shape.days);
        !s.ok()) {
      return s;
    }
    return GenerateFaults(line.faults, fleet, line.shape.gpus_per_machine, line.shape.days, line.shape.seed);
  }
  std::ifstream in(line.trace_path, std::ios::binary);
  if (!in) return absl::NotFoundError(line.trace_path + ": cannot open the trace file");
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<std::vector<FaultEvent>> faults = ParseFaultTrace(text.str(), line.shape.machines());
  if (!faults.ok()) return absl::InvalidArgumentError(line.trace_path + ": " + std::string(faults.status().message()));
  return faults;
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<SimCommandLine> parsed = ParseSimCommandLine(std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed.ok()) {
    std::cerr << "peregrine-sim: " << parsed.status().message() << "\n" << SimUsage();
    return 2;
  }
  SimCommandLine& line = *parsed;
  if (line.help) {
    std::cout << SimUsage();
    return 0;
  }
  if (absl::Status s = ValidateJobShape(line.shape); !s.ok()) return Fail(s);
  if (absl::Status s = ValidateCostModel(line.costs); !s.ok()) return Fail(s);
  if (absl::Status s = ValidateFaultModel(line.faults); !s.ok()) return Fail(s);
  absl::StatusOr<std::vector<FaultEvent>> faults = LoadFaults(line);
  if (!faults.ok()) return Fail(faults.status());
  const int spares = FleetMachines(line.shape, line.options) - line.shape.machines();

  std::vector<SimResult> results;
  std::vector<std::string> events;
  auto timed = [&](auto run) -> absl::Status {
    const double start = CpuSeconds();
    absl::StatusOr<SimResult> r = run();
    if (!r.ok()) return r.status();
    r->sim_cpu_s = CpuSeconds() - start;
    results.push_back(*std::move(r));
    return absl::OkStatus();
  };
  auto peregrine = [&](PeregrineVariant variant) {
    return timed([&]() {
      SimOptions options = line.options;
      options.variant = variant;
      if (line.events && variant == PeregrineVariant::kFull) options.event_log = &events;
      return SimulatePeregrine(line.shape, line.costs, *faults, options);
    });
  };
  absl::Status s = peregrine(PeregrineVariant::kFull);
  if (s.ok()) {
    s = timed([&]() -> absl::StatusOr<SimResult> {
      return RunRequeueBaseline(*faults, line.shape, line.costs, spares);
    });
  }
  if (s.ok() && !line.skip_variants) s = peregrine(PeregrineVariant::kStandbyNoMemoryCheckpoint);
  if (s.ok() && !line.skip_variants) s = peregrine(PeregrineVariant::kNoFailSlowMitigation);
  if (s.ok()) {
    s = timed([&]() -> absl::StatusOr<SimResult> { return RunOracle(*faults, line.shape, line.costs, spares); });
  }
  for (const std::string& e : events) std::cerr << e << "\n";
  if (!s.ok()) return Fail(s);
  std::cout << (line.json ? FormatResultsJson(line.shape, line.costs, results)
                          : FormatResultsTable(line.shape, results));
  return 0;
}
