// Compact, exact JSON forms of the per-machine parts of the TrainingJob status, so the
// status of a 12,500-machine (100,000-GPU) job stays far below etcd's object limit:
//   - machineTable: the slots of a job larger than kMaxListedMachines (pod and machine id
//     per slot, front-coded; observed flags; the few slots whose node is unready);
//   - checkpoint.placementRuns: the checkpoint placement as runs of slots whose holders
//     sit at the same offsets;
//   - checkpoint.eventsSeenBase / eventsSeenBySlot: the per-pod checkpoint-event marks
//     aligned with the slots, as offsets from the smallest.
// Each decodes to exactly the JobStatus fields it encodes (status_json.h uses them; the
// decision core never sees the difference). docs/kubernetes.md documents the forms.
//
// Adapter code (nlohmann-json); pure and thread-safe. Readers throw std::invalid_argument
// naming the field and the entry that is wrong (JobStatusFromJson turns it into an error).
#ifndef PEREGRINE_CONTROLLER_STATUS_COMPACT_H_
#define PEREGRINE_CONTROLLER_STATUS_COMPACT_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include <nlohmann/json.hpp>

#include "controller/core/job_state.h"

namespace peregrine {

// A job of at most this many machines lists them one by one in .status.machines; a larger
// one keeps .status.machineTable (the controller's HTTP API lists them all).
inline constexpr size_t kMaxListedMachines = 64;
// An incident names at most this many machine ids in the stored status (machinesCount
// says how many it acted on; the Evicted events name every one).
inline constexpr size_t kMaxStoredIncidentMachines = 64;

// Front coding: each name as "<bytes shared with the previous name>:<the rest>", the
// entries joined by single spaces. Names must be FrontCodable.
std::string FrontCode(const std::vector<std::string>& names);
// True when every name is printable ASCII without a space (node and pod names are).
bool FrontCodable(const std::vector<std::string>& names);
// The `count` names of FrontCode's text; throws naming `field` and the entry when the
// text is malformed or holds another number of entries.
std::vector<std::string> FrontDecode(absl::string_view text, size_t count, absl::string_view field);

// Prefix coding, for names that share a few prefixes in any order (node names of a few
// pools): each name split after its last '-' into a prefix, listed once in *prefixes in
// order of first use, and the rest: "<prefix index>:<rest>", joined by single spaces.
// Names must be FrontCodable.
std::string PrefixCode(const std::vector<std::string>& names, std::vector<std::string>* prefixes);
// The `count` names of PrefixCode's text; throws as FrontDecode does.
std::vector<std::string> PrefixDecode(absl::string_view text, const std::vector<std::string>& prefixes, size_t count,
                                      absl::string_view field);

// True when the slots can be written as a machineTable: slot i has index i and every pod
// and machine id is FrontCodable.
bool MachineTableFits(const std::vector<SlotStatus>& slots);
// {"count", "pods" (FrontCode), "machinePrefixes", "machineIds" (PrefixCode), "observed",
// "nodeUnready": [...]} (MachineTableFits).
nlohmann::json MachineTableToJson(const std::vector<SlotStatus>& slots);
std::vector<SlotStatus> MachineTableFromJson(const nlohmann::json& table);

// Counts for people: {"total", "observed", "replaced", "nodeUnready"}.
nlohmann::json MachineSummaryToJson(const std::vector<SlotStatus>& slots);

// The most slots a placement read back may have (a bound on what hostile text allocates).
inline constexpr size_t kMaxPlacementSlots = size_t{1} << 20;

// [{"slot", "count", "offsets"}]: slots slot..slot+count-1 each hold copies at
// slot + offsets[k]. Reading refuses more than `max_slots` slots in all.
nlohmann::json PlacementRunsToJson(const std::vector<CheckpointSlotPlacement>& placement);
std::vector<CheckpointSlotPlacement> PlacementRunsFromJson(const nlohmann::json& runs, size_t max_slots);

// Writes events_seen into `checkpoint`: the marks of the slots' pods as eventsSeenBase and
// eventsSeenBySlot (each slot's offset from the base in nanoseconds, base 36, "-" where
// none, joined by single spaces), the marks of other pods in eventsSeen. A mark of 0
// is the same as none and is not written.
void EventsSeenToJson(const std::map<std::string, int64_t>& seen, const std::vector<SlotStatus>& slots,
                      nlohmann::json* checkpoint);
// Reads them back (eventsSeen alone, as older statuses hold it, too).
std::map<std::string, int64_t> EventsSeenFromJson(const nlohmann::json& checkpoint, const std::vector<SlotStatus>& slots);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_STATUS_COMPACT_H_
