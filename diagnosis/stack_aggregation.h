// Stack aggregation and over-eviction (ByteRobust section 5.1): when a job hangs or its
// MFU drops, the stacks of every rank's training-related processes are captured, ranks
// with identical (normalised) stacks are grouped, the dominant group is taken as healthy
// and the others as outliers, and the smallest parallel group that covers the outliers is
// evicted whole ("over-eviction": fast isolation beats exact root cause).
//
// Normalisation (so that identical states compare equal across processes):
//   - addresses, thread ids, thread names and (by default) line numbers are dropped;
//   - function names lose argument lists, template arguments, lambda/closure decorations,
//     return types, glibc symbol versions (@@GLIBC_2.34) and gdb's __GI_ aliases;
//   - files are reduced to their base name (install prefixes differ between pods); a frame
//     without a file keeps its module's base name.
// Signature of a rank (the documented choice): for every process of the rank (the
// training process and its helpers: data-loader workers, checkpoint writers), the SET of
// normalised stacks of its selected threads; the rank's signature is the SET of its
// processes' signatures. Sets, not multisets, so that a pool of N identical workers and
// one of N+1 compare equal. By default all threads are selected (a root cause may sit in
// a helper thread or child process, as the paper observes); ThreadSelection::kMainThread
// keeps only each process's main thread when helper threads are too noisy.
// A rank absent from the input has the signature "<no stack captured>" (a process that
// cannot be attached to is itself suspicious).
//
// Choosing the group: eviction is per machine, so a group "contains" the outliers when
// its machines include every outlier rank's machine (rank-level containment would fail
// whenever a hung machine hosts several TP ranks). Among TP, PP and DP groups that do,
// the one with the fewest machines wins (ties: fewer ranks, then TP < PP < DP, then the
// lower index). If none does, the union of the outliers' machines is evicted and the
// explanation says so.
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
