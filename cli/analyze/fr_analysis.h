// What a set of per-rank flight recorder dumps (flight_recorder.h) says about a hang, per
// process group: the collective the others are stuck in, the ranks that never reached it,
// ranks that called a different collective at the same sequence number (a desync), the
// state of each rank's last entry, and unmatched point-to-point ops.
//
// AnalyzeFlightRecorder is pure (no I/O, no clock) and total: any set of dumps, including
// none, gives a report. Thread-compatible.
#ifndef PEREGRINE_CLI_ANALYZE_FR_ANALYSIS_H_
#define PEREGRINE_CLI_ANALYZE_FR_ANALYSIS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "cli/analyze/flight_recorder.h"

namespace peregrine {

// One rank's dump; `rank` is its global rank (from the file name).
struct FrRankDump {
  int rank = 0;
  FrDump dump;
};

enum class FrVerdict {
  kHealthy,       // nothing pending in the group
  kMissingRanks,  // some ranks never reached the collective the others wait in
  kMismatch,      // ranks called different collectives (or shapes, dtypes) at one seq id
  kAllStuck,      // every rank is in the collective and none completed it
  kMissingDumps,  // the ranks with dumps all wait in it; members without a dump may not
  kP2pUnmatched,  // no collective pending, but a send/recv has no matching peer op
  kP2pPending,    // no collective pending; p2p ops pending with matching peer ops
};
absl::string_view FrVerdictName(FrVerdict verdict);  // "healthy", "missing-ranks", ...

// A rank's view of one group.
struct FrRankInGroup {
  int rank = 0;
  bool has_dump = false;                // false: a member (per pg_config) without a readable dump
  std::optional<int64_t> last_seq;      // its highest collective_seq_id in the group
  std::string last_profiling_name;      // of that entry
  std::optional<FrState> last_state;
  std::string pending_elsewhere;        // its first pending op in another group, if any
};

struct FrMismatch {
  int64_t seq = 0;
  std::string field;  // "operation", "input dtypes", "output dtypes", "input sizes", "output sizes"
  std::string expected;
  std::vector<int> expected_ranks;
  std::string found;
  std::vector<int> ranks;
};

struct FrGroupReport {
  std::string name, desc;
  std::vector<int> ranks;  // members: pg_config's ranks, else the ranks with entries
  std::optional<int64_t> stuck_seq;
  std::string stuck_op;        // profiling_name at stuck_seq, e.g. "nccl:all_reduce"
  std::string stuck_detail;    // sizes and dtypes
  std::vector<int> waiting_ranks;  // hold stuck_seq, not completed
  std::vector<int> missing_ranks;  // last collective seq before stuck_seq (or none)
  std::vector<int> no_dump_ranks;  // members without a readable dump
  std::vector<FrMismatch> mismatches;
  std::vector<FrRankInGroup> rank_states;
  std::vector<std::string> p2p_findings;
  FrVerdict verdict = FrVerdict::kHealthy;
  std::string explanation;
};

struct FrReport {
  std::vector<int> ranks;  // ranks with a dump
  std::vector<std::string> versions;
  std::vector<FrGroupReport> groups;  // by group name
};

FrReport AnalyzeFlightRecorder(const std::vector<FrRankDump>& dumps);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_ANALYZE_FR_ANALYSIS_H_
