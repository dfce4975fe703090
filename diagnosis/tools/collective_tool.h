// What the collective tools (peregrine-linkcheck, peregrine-nccl-check) share around their
// measurement: the command line (the rank's NCCL world from torchrun's environment, then
// "--flag value" pairs), the usage message, joining the world with the memory of the
// buffers, and reporting a failed NCCL call. Every message goes to stderr, prefixed with the
// tool's name; the functions return the tools' exit codes for main to return.
//
// Thread-compatible; a CollectiveTool holds only its two strings.
#ifndef PEREGRINE_DIAGNOSIS_TOOLS_COLLECTIVE_TOOL_H_
#define PEREGRINE_DIAGNOSIS_TOOLS_COLLECTIVE_TOOL_H_

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "diagnosis/tools/device_memory.h"
#include "diagnosis/tools/nccl_world.h"
#include "nccl.h"

namespace peregrine {

// The tools' exit codes besides their verdicts (0, 1).
inline constexpr int kToolUsageExit = 2;  // usage, or buffers that cannot be placed as asked
inline constexpr int kToolNcclExit = 3;   // NCCL or rendezvous error

class CollectiveTool {
 public:
  // `name` ("peregrine-linkcheck") and its flags as the usage line lists them.
  constexpr CollectiveTool(const char* name, const char* flags_usage) : name_(name), flags_usage_(flags_usage) {}

  // Prints "<name>: <error>" and the usage line; returns kToolUsageExit.
  int Usage(absl::string_view error) const;

  // Reads the world from the environment into *world, then the flags argv[1..]: a flag in
  // `switches` takes no value (apply gets ""), any other the word after it; apply(flag,
  // value) stores it, or returns false when it does not accept it. Returns 0, or
  // kToolUsageExit after Usage (the environment's problem, "<flag> needs a value" or
  // "bad flag <flag> <value>").
  using FlagSetter = std::function<bool(const std::string& flag, const std::string& value)>;
  int ParseCommandLine(int argc, char** argv, std::initializer_list<absl::string_view> switches,
                       const FlagSetter& apply, NcclWorld* world) const;

  // Places the buffers (DeviceMemory::Open with `device_buffers` on the rank's local GPU)
  // and joins the world (JoinNcclWorld). Returns 0 with *memory and *comm set;
  // kToolUsageExit after Usage when the buffers cannot be placed as asked; kToolNcclExit
  // after "<name>: rank <r>: <status>" when the world cannot be joined.
  int Join(const NcclWorld& world, const std::string& device_buffers, int timeout_ms,
           std::unique_ptr<DeviceMemory>* memory, ncclComm_t* comm) const;

  // Prints "<name>: rank <rank>: <message>"; returns kToolNcclExit.
  int RankError(int rank, absl::string_view message) const;

  // True when `result` is ncclSuccess; else prints
  // "<name>: rank <rank>: <call> failed: <NCCL's error string>" and returns false.
  bool NcclOk(ncclResult_t result, int rank, const char* call) const;

 private:
  const char* name_;
  const char* flags_usage_;
};

// In a function that returns an exit code: evaluates the NCCL call `call`; when it fails,
// prints why (CollectiveTool::NcclOk) and returns kToolNcclExit.
#define PEREGRINE_NCCL_CHECK(tool, rank, call)                                       \
  do {                                                                               \
    if (!(tool).NcclOk((call), (rank), #call)) return ::peregrine::kToolNcclExit;    \
  } while (0)

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_TOOLS_COLLECTIVE_TOOL_H_
