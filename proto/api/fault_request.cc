#include "proto/api/fault_request.h"

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace peregrine {

absl::StatusOr<FaultRequest> ParseFaultRequest(const std::string& json_text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("fault request is not JSON: ", e.what()));
  }
  if (!j.is_object()) return absl::InvalidArgumentError("fault request must be a JSON object");
  FaultRequest r;
  try {
    r.kind = j.at("kind").get<std::string>();
    r.slot = j.value("slot", -1);
    r.machine = j.value("machine", "");
    r.local_rank = j.value("localRank", -1);
    r.factor = j.value("factor", 1.0);
    r.fraction = j.value("fraction", 0.0);
    r.peer_slot = j.value("peerSlot", -1);
    r.peer_machine = j.value("peerMachine", "");
    r.delay_us = j.value("delayUs", int64_t{0});
    r.bandwidth_bytes_per_second = j.value("bandwidthBytesPerSecond", 0.0);
    r.xid = j.value("xid", 79);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("fault request: ", e.what()));
  }
  static const char* kKinds[] = {"kill", "crash", "hang",         "slow", "jitter",   "nan",  "corrupt",
                                 "sdc",  "nvlink", "link-corrupt", "link", "xid", "nic-flap", "clear"};
  if (std::find(std::begin(kKinds), std::end(kKinds), r.kind) == std::end(kKinds)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kind: unknown fault '", r.kind,
        "' (expected kill, crash, hang, slow, jitter, nan, corrupt, sdc, nvlink, link, link-corrupt, xid, nic-flap "
        "or clear)"));
  }
  if (r.kind == "slow" && !(r.factor > 1.0)) return absl::InvalidArgumentError("factor: a slowdown must be > 1");
  if (r.kind == "jitter" && !(r.fraction > 0.0 && r.fraction < 1.0)) {
    return absl::InvalidArgumentError("fraction: a jitter fraction must be in (0, 1), e.g. 0.05 for +-5%");
  }
  if (r.kind == "link" && r.delay_us <= 0 && r.bandwidth_bytes_per_second <= 0) {
    return absl::InvalidArgumentError("delayUs or bandwidthBytesPerSecond: a link fault needs one of them > 0");
  }
  if (r.kind == "xid" && (r.xid <= 0 || r.xid > 1000)) return absl::InvalidArgumentError("xid: expected 1..1000");
  if (r.kind != "clear" && r.slot < 0 && r.machine.empty()) {
    return absl::InvalidArgumentError("slot or machine: the fault needs a target");
  }
  return r;
}

std::string FaultRequestToJson(const FaultRequest& r) {
  nlohmann::json j = {{"kind", r.kind}, {"localRank", r.local_rank}};
  if (r.slot >= 0) j["slot"] = r.slot;
  if (!r.machine.empty()) j["machine"] = r.machine;
  if (r.kind == "slow") j["factor"] = r.factor;
  if (r.kind == "jitter") j["fraction"] = r.fraction;
  if (r.peer_slot >= 0) j["peerSlot"] = r.peer_slot;
  if (!r.peer_machine.empty()) j["peerMachine"] = r.peer_machine;
  if (r.delay_us > 0) j["delayUs"] = r.delay_us;
  if (r.bandwidth_bytes_per_second > 0) j["bandwidthBytesPerSecond"] = r.bandwidth_bytes_per_second;
  if (r.kind == "xid") j["xid"] = r.xid;
  return j.dump();
}

}  // namespace peregrine
