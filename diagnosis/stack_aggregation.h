// Stack aggregation and over-eviction: when a job hangs or its MFU drops, group ranks by
// their normalised stacks, take the dominant group as healthy and the others as suspects,
// and choose the smallest parallel group covering the suspects' machines to evict whole.
//
// Signature of a rank: for every process of the rank, the SET of normalised stacks of its
// selected threads (all threads, or kMainThread); the rank's signature is the SET of its
// processes' signatures (so pools of N and N+1 identical workers compare equal). A rank
// absent from the input has the signature "<no stack captured>". AggregateStacks fails
// with kInvalidArgument when a rank is out of range or appears twice. Normalisation and
// the group choice are described in stack_aggregation.cc.
//
// Pure functions; no I/O.
#ifndef PEREGRINE_DIAGNOSIS_STACK_AGGREGATION_H_
#define PEREGRINE_DIAGNOSIS_STACK_AGGREGATION_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "diagnosis/parallel_layout.h"
#include "diagnosis/stack_frame_kinds.h"
#include "diagnosis/stack_parse.h"

namespace peregrine {

// Everything captured for one global rank.
struct RankStacks {
  int rank = 0;
  std::vector<ProcessStack> processes;
};

enum class ThreadSelection { kAllThreads, kMainThread };

struct StackAggregationOptions {
  ThreadSelection threads = ThreadSelection::kAllThreads;
  bool keep_line_numbers = false;  // true splits ranks paused on different lines
  int max_frames = 0;              // innermost frames compared per thread; 0 = all
};

// "void std::foo<int>::bar(int) const" -> "std::foo::bar"; "__GI___libc_read" ->
// "__libc_read"; "wait" -> "wait"; "<module>" -> "<module>".
std::string NormalizeFunctionName(absl::string_view function);

// One normalised frame: "function @ file[:line]" (or "@ module" when no file).
std::string NormalizeFrame(const StackFrame& frame, bool keep_line_number);

// The normalised signature of one rank (see the header comment).
std::string RankSignature(const RankStacks& rank, const StackAggregationOptions& options = {});

struct StackGroup {
  std::string signature;
  std::vector<int> ranks;  // ascending
  std::string summary;  // innermost normalised frames of the first process's main thread
  // What the group's main thread is doing (stack_frame_kinds.h) and the frame that says so.
  FrameKind kind = FrameKind::kUnknown;
  std::string kind_frame;
  // Frames of the group's main thread found in no other group's main thread, innermost
  // first (at most 3); empty when the groups differ only in other threads or processes.
  std::vector<std::string> distinguishing_frames;
};

// How much the verdict can be trusted:
//   kHigh:   one group clearly dominant and a single outlier group, a lone minority group
//            with an idle signature whose parallel-group peers wait in collectives, or no
//            outlier at all (every rank identical);
//   kMedium: several outlier groups, or a tie broken by activity (idle signatures, ranks
//            outside any collective) rather than by size;
//   kLow:    the largest groups (nearly) tie and no activity separates them: a near tie is
//            decided by size alone; an exact tie evicts nothing (capture again).
enum class VerdictConfidence { kHigh, kMedium, kLow };
const char* VerdictConfidenceName(VerdictConfidence confidence);  // "high", "medium", "low"

struct OverEvictionChoice {
  std::optional<CommGroup> group;  // empty when no group covers the suspects (or none)
  std::vector<int> machines;       // ascending; empty when there are no suspects
  std::string reason;
};

// The smallest TP/PP/DP group whose machines cover every suspect rank's machine, or the
// union of their machines when none does. PEREGRINE_CHECKs that ranks are in range.
OverEvictionChoice ChooseOverEviction(const ParallelLayout& layout,
                                      absl::Span<const int> suspect_ranks);

struct StackAggregation {
  std::vector<StackGroup> groups;  // largest first; ties: the group with the lowest rank
  // Index into groups of the largest group taken as healthy; -1 when there is no verdict
  // (an exact tie no activity separates).
  int dominant_group = -1;
  std::vector<int> suspect_groups;    // indices into groups, ascending
  std::vector<int> suspect_ranks;     // ranks of the suspect groups, ascending
  std::optional<CommGroup> chosen_group;
  std::vector<int> machines_to_evict;  // ascending; empty when nothing is suspect
  VerdictConfidence confidence = VerdictConfidence::kLow;
  std::string confidence_reason;       // "unique minority group", "tie broken by idle signature", ...
  // Human-readable, for events and incident history: the first line is the verdict and
  // ends with "Confidence: <level> (<reason>)."; one line per group follows.
  std::string explanation;
};

// Groups ranks by signature and plans the over-eviction. With a single group nothing is
// suspect. With a clear largest group (the second largest holds under 3/4 of its ranks)
// every other group is suspect. When the largest groups tie or nearly tie, activity
// decides (stack_aggregation.cc): groups with an idle signature (data loading, queue/lock,
// idle) while others wait in collectives, else groups outside any collective while others
// wait in one; a near tie nothing separates falls back to size (low confidence), an exact
// tie evicts nothing. Fails with kInvalidArgument when a rank is out of range or appears
// twice.
absl::StatusOr<StackAggregation> AggregateStacks(const ParallelLayout& layout,
                                                 absl::Span<const RankStacks> ranks,
                                                 const StackAggregationOptions& options = {});

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_STACK_AGGREGATION_H_
