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
};

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
  int dominant_group = -1;  // index into groups; -1 when the largest groups tie
  std::vector<int> suspect_ranks;     // ranks outside the dominant group, ascending
  std::optional<CommGroup> chosen_group;
  std::vector<int> machines_to_evict;  // ascending; empty when nothing is suspect
  std::string explanation;             // human-readable, for events and incident history
};

// Groups ranks by signature and plans the over-eviction. With a single group nothing is
// suspect; with a tie for the largest group there is no healthy majority, so nothing is
// evicted and the explanation says so. Fails with kInvalidArgument when a rank is out of
// range or appears twice.
absl::StatusOr<StackAggregation> AggregateStacks(const ParallelLayout& layout,
                                                 absl::Span<const RankStacks> ranks,
                                                 const StackAggregationOptions& options = {});

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_STACK_AGGREGATION_H_
