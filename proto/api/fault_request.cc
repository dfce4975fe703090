#include "proto/api/fault_request.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <tuple>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace peregrine {
namespace {

// Integer field `key` of `j`, `fallback` when absent. A number out of T's range, or with
// a fraction, is an error naming the field (nlohmann's own conversion casts a double
// such as 1e99 to T, which is undefined behaviour).
template <typename T>
absl::StatusOr<T> IntField(const nlohmann::json& j, const char* key, T fallback) {
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  constexpr T kMin = std::numeric_limits<T>::min();
  constexpr T kMax = std::numeric_limits<T>::max();
  if (it->is_number_unsigned()) {
    const uint64_t v = it->template get<uint64_t>();
    if (v <= static_cast<uint64_t>(kMax)) return static_cast<T>(v);
  } else if (it->is_number_integer()) {
    const int64_t v = it->template get<int64_t>();
    if (v >= kMin && v <= kMax) return static_cast<T>(v);
  } else if (it->is_number_float()) {
    const double v = it->template get<double>();
    // Whole doubles in [kMin, -kMin) convert; both bounds are powers of two, so exact.
    if (std::trunc(v) == v && v >= static_cast<double>(kMin) && v < -static_cast<double>(kMin)) {
      return static_cast<T>(v);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(key, ": expected an integer in [", kMin, ", ", kMax, "], got ", it->dump()));
}

}  // namespace

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
    r.machine = j.value("machine", "");
    r.factor = j.value("factor", 1.0);
    r.fraction = j.value("fraction", 0.0);
    r.peer_machine = j.value("peerMachine", "");
    r.bandwidth_bytes_per_second = j.value("bandwidthBytesPerSecond", 0.0);
    for (auto [key, fallback, field] : {std::tuple{"slot", -1, &r.slot}, std::tuple{"localRank", -1, &r.local_rank},
                                        std::tuple{"peerSlot", -1, &r.peer_slot}, std::tuple{"xid", 79, &r.xid}}) {
      absl::StatusOr<int> v = IntField<int>(j, key, fallback);
      if (!v.ok()) return v.status();
      *field = *v;
    }
    absl::StatusOr<int64_t> delay_us = IntField<int64_t>(j, "delayUs", 0);
    if (!delay_us.ok()) return delay_us.status();
    r.delay_us = *delay_us;
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
