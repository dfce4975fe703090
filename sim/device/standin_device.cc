// libperegrine_sim_device.so: the stand-in cluster's implementation of the stand-in device
// (diagnosis/tools/standin_device.h). It answers from the fault table named by env
// PEREGRINE_SIM_FAULTS (no table: every GPU healthy), so what it reports is exactly the
// fault that was injected: an oracle, and labelled as one by the tools that use it.
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "diagnosis/tools/standin_device.h"
#include "sim/fault/fault_table.h"

extern "C" __attribute__((visibility("default"))) int peregrine_standin_gpu(int machine, int local_rank,
                                                                            PeregrineStandInGpu* out) {
  static std::mutex mu;
  static std::unique_ptr<peregrine::sim::FaultTableReader> reader;
  std::lock_guard<std::mutex> lock(mu);
  if (reader == nullptr) {
    const char* path = std::getenv("PEREGRINE_SIM_FAULTS");
    reader = std::make_unique<peregrine::sim::FaultTableReader>(path != nullptr ? path : "");
  }
  const peregrine::sim::RankFault fault = reader->Poll().RankFaultFor(machine, local_rank);
  out->compute_slowdown = fault.compute_slowdown;
  out->hang = fault.hang ? 1 : 0;
  out->crash = fault.crash ? 1 : 0;
  out->nan = fault.nan ? 1 : 0;
  out->corrupt = fault.corrupt ? 1 : 0;
  return 0;
}
