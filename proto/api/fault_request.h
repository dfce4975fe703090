// FaultRequest: the body of POST /api/v1/jobs/{namespace}/{name}/faults, the local
// mode's fault injection (peregrinectl inject, the demo scenarios, tests). This is part
// of the HTTP API's wire contract, shared by the controller and peregrinectl; what each
// kind does is described with the local mode's FaultInjector (controller/local/fault_injector.cc).
//
// JSON fields: kind (kill | crash | hang | slow | jitter | nan | corrupt | sdc | nvlink |
// link | link-corrupt | xid | nic-flap | clear), slot or machine (the target; optional
// only for clear), localRank (-1: the whole machine), factor (slow, > 1), fraction
// (jitter, in (0, 1)), peerSlot / peerMachine, delayUs, bandwidthBytesPerSecond (link,
// link-corrupt), xid (default 79).
//
// Pure functions; thread-safe. Errors are kInvalidArgument naming the field.
#ifndef PEREGRINE_PROTO_API_FAULT_REQUEST_H_
#define PEREGRINE_PROTO_API_FAULT_REQUEST_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace peregrine {

struct FaultRequest {
  std::string kind;
  int slot = -1;
  std::string machine;
  int local_rank = -1;
  double factor = 1.0;
  double fraction = 0.0;  // jitter
  int peer_slot = -1;
  std::string peer_machine;
  int64_t delay_us = 0;
  double bandwidth_bytes_per_second = 0;
  int xid = 79;
};

// Parses and validates the JSON form.
absl::StatusOr<FaultRequest> ParseFaultRequest(const std::string& json_text);
// The JSON form ParseFaultRequest reads back.
std::string FaultRequestToJson(const FaultRequest& request);

}  // namespace peregrine

#endif  // PEREGRINE_PROTO_API_FAULT_REQUEST_H_
