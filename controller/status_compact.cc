#include "controller/status_compact.h"

#include <algorithm>
#include <charconv>
#include <string_view>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "controller/status_json.h"

// Why these forms. At 12,500 machines the listed slots took 111 bytes each (1.39 MB),
// the placement 35 and the per-pod event marks 20 to 40: the status outgrew etcd's
// 1.5 MiB object limit. All of it is state the decision core resumes from after a
// controller restart, so none of it may be dropped; the forms below keep every byte of
// it and shrink it by exploiting its regularity:
//   - pod names are "<job>-m<slot>[-<serial>]" and node names share a pool prefix, so
//     front coding (the bytes shared with the previous name, then the rest) leaves a few
//     bytes a name;
//   - the placement is a pure function of the layout: holders sit at the same offsets
//     from their slot for long runs of slots;
//   - the event marks are keyed by the slots' pods (ObserveCheckpoints rebuilds them so),
//     so the keys are implied by the slot order and the times are small offsets.

namespace peregrine {
namespace {

using nlohmann::json;

[[noreturn]] void Bad(absl::string_view field, const std::string& why) {
  throw std::invalid_argument(absl::StrCat(field, ": ", why));
}

uint64_t ParseUnsigned(absl::string_view text, absl::string_view field, size_t entry) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    Bad(field, absl::StrCat("entry ", entry, ": '", text, "' is not a non-negative integer"));
  }
  return v;
}

template <typename T>
T JsonInt(const json& j, const char* key, absl::string_view field) {
  if (!j.contains(key) || !j[key].is_number_integer()) Bad(field, absl::StrCat(key, ": expected an integer"));
  if (j[key].is_number_unsigned()) {
    const uint64_t u = j[key].get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) Bad(field, absl::StrCat(key, ": out of range"));
    return static_cast<T>(u);
  }
  const int64_t i = j[key].get<int64_t>();
  if (i < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
      (i > 0 && static_cast<uint64_t>(i) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
    Bad(field, absl::StrCat(key, ": out of range"));
  }
  return static_cast<T>(i);
}

std::string Time(int64_t nanos) { return nanos == 0 ? "" : FormatRfc3339(nanos); }

int64_t ParseTime(const json& j, const char* key, absl::string_view field) {
  if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty()) return 0;
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, j[key].get<std::string>(), &t, &err)) {
    Bad(field, absl::StrCat(key, ": not an RFC 3339 time: ", err));
  }
  return absl::ToUnixNanos(t);
}

std::string StringField(const json& j, const char* key, absl::string_view field) {
  if (!j.contains(key) || !j[key].is_string()) Bad(field, absl::StrCat(key, ": expected a string"));
  return j[key].get<std::string>();
}

std::string Base36(uint64_t v) {
  std::string out;
  do {
    out.push_back("0123456789abcdefghijklmnopqrstuvwxyz"[v % 36]);
    v /= 36;
  } while (v != 0);
  return std::string(out.rbegin(), out.rend());
}

uint64_t ParseBase36(absl::string_view text, absl::string_view field, size_t entry) {
  if (text.empty() || text.size() > 13) Bad(field, absl::StrCat("entry ", entry, ": '", text, "' is not a base-36 offset"));
  uint64_t v = 0;
  for (char c : text) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : -1;
    if (d < 0) Bad(field, absl::StrCat("entry ", entry, ": '", text, "' is not a base-36 offset"));
    if (v > (std::numeric_limits<uint64_t>::max() - static_cast<uint64_t>(d)) / 36) {
      Bad(field, absl::StrCat("entry ", entry, ": '", text, "' is out of range"));
    }
    v = v * 36 + static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace

bool FrontCodable(const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    for (char c : n) {
      if (c <= ' ' || c > '~') return false;
    }
  }
  return true;
}

std::string FrontCode(const std::vector<std::string>& names) {
  std::string out;
  absl::string_view prev;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    size_t shared = 0;
    while (shared < n.size() && shared < prev.size() && n[shared] == prev[shared]) ++shared;
    if (i > 0) out.push_back(' ');
    absl::StrAppend(&out, shared, ":", absl::string_view(n).substr(shared));
    prev = n;
  }
  return out;
}

std::vector<std::string> FrontDecode(absl::string_view text, size_t count, absl::string_view field) {
  std::vector<std::string> out;
  if (count == 0) {
    if (!text.empty()) Bad(field, "entries present but the count is 0");
    return out;
  }
  out.reserve(std::min(count, text.size() / 2 + 1));  // a count the text cannot hold allocates nothing
  for (absl::string_view entry : absl::StrSplit(text, ' ')) {
    const size_t colon = entry.find(':');
    if (colon == absl::string_view::npos) Bad(field, absl::StrCat("entry ", out.size(), ": no ':' in '", entry, "'"));
    const uint64_t shared = ParseUnsigned(entry.substr(0, colon), field, out.size());
    const std::string& prev = out.empty() ? std::string() : out.back();
    if (shared > prev.size()) {
      Bad(field, absl::StrCat("entry ", out.size(), ": shares ", shared, " bytes with a previous name of ", prev.size()));
    }
    if (out.size() == count) Bad(field, absl::StrCat("more than the ", count, " entries the count says"));
    out.push_back(absl::StrCat(absl::string_view(prev).substr(0, shared), entry.substr(colon + 1)));
  }
  if (out.size() != count) Bad(field, absl::StrCat(out.size(), " entries, the count says ", count));
  return out;
}

std::string PrefixCode(const std::vector<std::string>& names, std::vector<std::string>* prefixes) {
  std::map<std::string, size_t, std::less<>> index;
  for (size_t k = 0; k < prefixes->size(); ++k) index.emplace((*prefixes)[k], k);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    const absl::string_view n = names[i];
    const size_t dash = n.rfind('-');
    const absl::string_view prefix = dash == absl::string_view::npos ? absl::string_view() : n.substr(0, dash + 1);
    auto it = index.find(prefix);
    if (it == index.end()) {
      it = index.emplace(std::string(prefix), prefixes->size()).first;
      prefixes->push_back(std::string(prefix));
    }
    if (i > 0) out.push_back(' ');
    absl::StrAppend(&out, it->second, ":", n.substr(prefix.size()));
  }
  return out;
}

std::vector<std::string> PrefixDecode(absl::string_view text, const std::vector<std::string>& prefixes, size_t count,
                                      absl::string_view field) {
  std::vector<std::string> out;
  if (count == 0) {
    if (!text.empty()) Bad(field, "entries present but the count is 0");
    return out;
  }
  out.reserve(std::min(count, text.size() / 2 + 1));
  for (absl::string_view entry : absl::StrSplit(text, ' ')) {
    const size_t colon = entry.find(':');
    if (colon == absl::string_view::npos) Bad(field, absl::StrCat("entry ", out.size(), ": no ':' in '", entry, "'"));
    const uint64_t k = ParseUnsigned(entry.substr(0, colon), field, out.size());
    if (k >= prefixes.size()) {
      Bad(field, absl::StrCat("entry ", out.size(), ": prefix ", k, " of ", prefixes.size()));
    }
    if (out.size() == count) Bad(field, absl::StrCat("more than the ", count, " entries the count says"));
    out.push_back(absl::StrCat(prefixes[k], entry.substr(colon + 1)));
  }
  if (out.size() != count) Bad(field, absl::StrCat(out.size(), " entries, the count says ", count));
  return out;
}

bool MachineTableFits(const std::vector<SlotStatus>& slots) {
  std::vector<std::string> names;
  names.reserve(2 * slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].index != static_cast<int>(i)) return false;
    names.push_back(slots[i].pod);
    names.push_back(slots[i].machine_id);
  }
  return FrontCodable(names);
}

json MachineTableToJson(const std::vector<SlotStatus>& slots) {
  std::vector<std::string> pods, machines;
  std::string observed;
  json unready = json::array();
  for (const SlotStatus& s : slots) {
    pods.push_back(s.pod);
    machines.push_back(s.machine_id);
    observed.push_back(s.observed ? '1' : '0');
    if (s.node_unready_since != 0) {
      unready.push_back({{"index", s.index}, {"nodeUnreadySince", Time(s.node_unready_since)},
                         {"nodeUnreadyStep", s.node_unready_step},
                         {"nodeUnreadyProgressAt", Time(s.node_unready_progress_at)}});
    }
  }
  std::vector<std::string> prefixes;
  const std::string machine_ids = PrefixCode(machines, &prefixes);
  return {{"count", slots.size()}, {"pods", FrontCode(pods)}, {"machinePrefixes", prefixes},
          {"machineIds", machine_ids}, {"observed", observed}, {"nodeUnready", unready}};
}

std::vector<SlotStatus> MachineTableFromJson(const json& table) {
  constexpr absl::string_view kField = "machineTable";
  if (!table.is_object()) Bad(kField, "expected an object");
  const int count = JsonInt<int>(table, "count", kField);
  if (count < 0) Bad(kField, "count: negative");
  const std::vector<std::string> pods =
      FrontDecode(StringField(table, "pods", kField), static_cast<size_t>(count), "machineTable.pods");
  if (!table.contains("machinePrefixes") || !table["machinePrefixes"].is_array()) {
    Bad(kField, "machinePrefixes: expected an array of strings");
  }
  std::vector<std::string> prefixes;
  for (const json& p : table["machinePrefixes"]) {
    if (!p.is_string()) Bad(kField, "machinePrefixes: expected an array of strings");
    prefixes.push_back(p.get<std::string>());
  }
  const std::vector<std::string> machines = PrefixDecode(StringField(table, "machineIds", kField), prefixes,
                                                         static_cast<size_t>(count), "machineTable.machineIds");
  const std::string observed = StringField(table, "observed", kField);
  if (observed.size() != static_cast<size_t>(count) || observed.find_first_not_of("01") != std::string::npos) {
    Bad("machineTable.observed", absl::StrCat("expected ", count, " characters 0 or 1"));
  }
  std::vector<SlotStatus> slots(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    slots[i].index = i;
    slots[i].pod = pods[i];
    slots[i].machine_id = machines[i];
    slots[i].observed = observed[i] == '1';
  }
  if (table.contains("nodeUnready")) {
    if (!table["nodeUnready"].is_array()) Bad("machineTable.nodeUnready", "expected an array");
    for (const json& u : table["nodeUnready"]) {
      constexpr absl::string_view kUnready = "machineTable.nodeUnready[]";
      if (!u.is_object()) Bad(kUnready, "expected an object");
      const int index = JsonInt<int>(u, "index", kUnready);
      if (index < 0 || index >= count) Bad(kUnready, absl::StrCat("index ", index, " is not a slot of ", count));
      SlotStatus& s = slots[index];
      s.node_unready_since = ParseTime(u, "nodeUnreadySince", kUnready);
      s.node_unready_step = u.contains("nodeUnreadyStep") ? JsonInt<uint64_t>(u, "nodeUnreadyStep", kUnready) : 0;
      s.node_unready_progress_at = ParseTime(u, "nodeUnreadyProgressAt", kUnready);
    }
  }
  return slots;
}

json MachineSummaryToJson(const std::vector<SlotStatus>& slots) {
  int observed = 0, replaced = 0, unready = 0;
  for (const SlotStatus& s : slots) {
    observed += s.observed ? 1 : 0;
    // A slot's first pod is "<job>-m<slot>"; a replacement adds "-<serial>".
    const std::string first_suffix = absl::StrCat("-m", s.index);
    replaced += s.pod.size() < first_suffix.size() ||
                        s.pod.compare(s.pod.size() - first_suffix.size(), first_suffix.size(), first_suffix) != 0
                    ? 1
                    : 0;
    unready += s.node_unready_since != 0 ? 1 : 0;
  }
  return {{"total", slots.size()}, {"observed", observed}, {"replaced", replaced}, {"nodeUnready", unready}};
}

json PlacementRunsToJson(const std::vector<CheckpointSlotPlacement>& placement) {
  json runs = json::array();
  std::vector<int> prev_offsets;
  int prev_slot = 0;
  for (const CheckpointSlotPlacement& p : placement) {
    std::vector<int> offsets;
    offsets.reserve(p.holders.size());
    for (int h : p.holders) offsets.push_back(h - p.slot);
    if (!runs.empty() && p.slot == prev_slot + 1 && offsets == prev_offsets) {
      runs.back()["count"] = runs.back()["count"].get<int>() + 1;
    } else {
      runs.push_back({{"slot", p.slot}, {"count", 1}, {"offsets", offsets}});
    }
    prev_slot = p.slot;
    prev_offsets = std::move(offsets);
  }
  return runs;
}

std::vector<CheckpointSlotPlacement> PlacementRunsFromJson(const json& runs, size_t max_slots) {
  constexpr absl::string_view kField = "checkpoint.placementRuns[]";
  if (!runs.is_array()) Bad("checkpoint.placementRuns", "expected an array");
  std::vector<CheckpointSlotPlacement> out;
  for (const json& r : runs) {
    if (!r.is_object()) Bad(kField, "expected an object");
    const int slot = JsonInt<int>(r, "slot", kField);
    const int count = JsonInt<int>(r, "count", kField);
    if (count < 1 || static_cast<size_t>(count) > max_slots - std::min(max_slots, out.size())) {
      Bad(kField, absl::StrCat("count ", count, " at slot ", slot, ": the placement has at most ", max_slots, " slots"));
    }
    if (!r.contains("offsets") || !r["offsets"].is_array()) Bad(kField, "offsets: expected an array of integers");
    std::vector<int64_t> offsets;
    for (const json& o : r["offsets"]) {
      if (!o.is_number_integer()) Bad(kField, "offsets: expected an array of integers");
      offsets.push_back(o.get<int64_t>());
    }
    for (int k = 0; k < count; ++k) {
      const int64_t s = static_cast<int64_t>(slot) + k;
      CheckpointSlotPlacement p;
      p.slot = static_cast<int>(s);
      for (int64_t o : offsets) {
        const int64_t h = s + o;
        if (h < std::numeric_limits<int>::min() || h > std::numeric_limits<int>::max()) Bad(kField, "a holder is out of range");
        p.holders.push_back(static_cast<int>(h));
      }
      out.push_back(std::move(p));
    }
  }
  return out;
}

void EventsSeenToJson(const std::map<std::string, int64_t>& seen, const std::vector<SlotStatus>& slots,
                      json* checkpoint) {
  std::map<std::string, int64_t> others;
  for (const auto& [pod, at] : seen) {
    if (at != 0) others[pod] = at;
  }
  int64_t base = std::numeric_limits<int64_t>::max();
  for (const SlotStatus& s : slots) {
    auto it = others.find(s.pod);
    if (it != others.end()) base = std::min(base, it->second);
  }
  if (base != std::numeric_limits<int64_t>::max()) {
    std::string by_slot;
    for (const SlotStatus& s : slots) {
      if (!by_slot.empty()) by_slot.push_back(' ');
      auto it = seen.find(s.pod);
      if (it == seen.end() || it->second == 0) {
        by_slot.push_back('-');
      } else {
        by_slot += Base36(static_cast<uint64_t>(it->second) - static_cast<uint64_t>(base));
      }
    }
    for (const SlotStatus& s : slots) others.erase(s.pod);
    (*checkpoint)["eventsSeenBase"] = base;
    (*checkpoint)["eventsSeenBySlot"] = by_slot;
  }
  (*checkpoint)["eventsSeen"] = others;
}

std::map<std::string, int64_t> EventsSeenFromJson(const json& checkpoint, const std::vector<SlotStatus>& slots) {
  std::map<std::string, int64_t> out;
  if (checkpoint.contains("eventsSeen")) {
    const json& e = checkpoint["eventsSeen"];
    if (!e.is_object()) Bad("checkpoint.eventsSeen", "expected an object of integers");
    for (const auto& [pod, v] : e.items()) {
      if (!v.is_number_integer()) Bad("checkpoint.eventsSeen", absl::StrCat(pod, ": expected an integer"));
      if (v.get<int64_t>() != 0) out[pod] = v.get<int64_t>();
    }
  }
  if (!checkpoint.contains("eventsSeenBySlot")) return out;
  constexpr absl::string_view kField = "checkpoint.eventsSeenBySlot";
  const int64_t base = JsonInt<int64_t>(checkpoint, "eventsSeenBase", "checkpoint");
  const std::string by_slot = StringField(checkpoint, "eventsSeenBySlot", "checkpoint");
  size_t i = 0;
  for (absl::string_view entry : absl::StrSplit(by_slot, ' ')) {
    if (i == slots.size()) Bad(kField, absl::StrCat("more entries than the ", slots.size(), " slots"));
    if (entry != "-") {
      const uint64_t offset = ParseBase36(entry, kField, i);
      // base + offset must be an int64: offset <= INT64_MAX - base, which fits a uint64.
      if (offset > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - static_cast<uint64_t>(base)) {
        Bad(kField, absl::StrCat("entry ", i, ": out of range"));
      }
      out[slots[i].pod] = static_cast<int64_t>(static_cast<uint64_t>(base) + offset);
    }
    ++i;
  }
  if (i != slots.size()) Bad(kField, absl::StrCat(i, " entries for ", slots.size(), " slots"));
  return out;
}

}  // namespace peregrine
