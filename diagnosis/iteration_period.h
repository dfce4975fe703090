// Iteration-time inference from a rank's stream of NCCL calls (Falcon-Detect).
//
// Calls are encoded by signature (operation, communicator, element count, datatype);
// DetectPeriod finds the recurring period as the FIRST lag whose ACF >= 0.95, where the
// ACF of the categorical sequence x is Cohen's kappa between x[0, L-k) and x[k, L):
//     ACF(k) = (match(k) - chance(k)) / (1 - chance(k))
// (match(k): fraction of positions with x[t] == x[t+k]; chance(k) = sum_c p_c q_c from the
// two segments' signature frequencies). IterationTracker measures an iteration as the time
// between an anchor call and its counterpart one period later, tolerating warm-up, extra
// and substituted calls, and re-detects after a restart. Errors: kInvalidArgument for
// options out of range, kNotFound when no period qualifies. Rationale and robustness rules
// are described in iteration_period.cc.
//
// Pure computation: no clocks, no I/O. All types are values; IterationTracker is
// thread-compatible (one owner feeds it).
#ifndef PEREGRINE_DIAGNOSIS_ITERATION_PERIOD_H_
#define PEREGRINE_DIAGNOSIS_ITERATION_PERIOD_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace peregrine {

// The NCCL entry point a call went through.
enum class NcclOp : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kSend,
  kRecv,
  kAllToAll,
  kOther,
};

// One intercepted NCCL call, as the agent reads it from the hook's ring.
struct NcclCallRecord {
  NcclOp op = NcclOp::kOther;
  uint64_t comm_id = 0;  // communicator identity (stable for the communicator's life)
  uint64_t count = 0;    // element count
  int32_t datatype = 0;  // ncclDataType_t value
  int64_t enter_ns = 0;  // time the call entered NCCL, any monotonic epoch
};

// What makes two calls "the same call" for period inference.
struct CallSignature {
  NcclOp op = NcclOp::kOther;
  uint64_t comm_id = 0;
  uint64_t count = 0;
  int32_t datatype = 0;
  bool operator==(const CallSignature&) const = default;
};
struct CallSignatureHash {
  size_t operator()(const CallSignature& s) const;
};
inline CallSignature SignatureOf(const NcclCallRecord& r) {
  return CallSignature{r.op, r.comm_id, r.count, r.datatype};
}

// Dense code of a call signature; codes are assigned by an encoder in order of first
// appearance.
using CallSymbol = uint16_t;

struct PeriodOptions {
  // The period is the first lag whose ACF reaches this value (Falcon: 0.95).
  double acf_threshold = 0.95;
  // Largest lag examined; lags are also bounded by L / min_repeats.
  int max_lag = 1024;
  // The sequence must contain at least this many periods for a lag to be considered.
  int min_repeats = 3;
};

struct PeriodEstimate {
  int period = 0;    // calls per iteration
  double acf = 0.0;  // ACF at that lag
};

// ACF(k) for k = 1..max_lag (index k-1), as defined above. Lags with fewer than one
// overlapping element are omitted, so the result may be shorter than max_lag.
std::vector<double> CallSequenceAcf(absl::Span<const CallSymbol> symbols, int max_lag);

// The first lag k in [1, min(max_lag, size / min_repeats)] with ACF(k) >= acf_threshold.
// Fails with kNotFound when no lag qualifies (including sequences too short to hold
// min_repeats periods) and kInvalidArgument for options out of range.
absl::StatusOr<PeriodEstimate> DetectPeriod(absl::Span<const CallSymbol> symbols,
                                            const PeriodOptions& options = {});

// One measured iteration: the interval between two consecutive occurrences of the anchor.
struct IterationSample {
  int64_t start_ns = 0;      // enter time of the anchor call opening the iteration
  int64_t end_ns = 0;        // enter time of the anchor call one period later
  int64_t duration_ns = 0;   // end_ns - start_ns
  uint64_t end_call = 0;     // stream position (0-based) of the closing anchor call
  int period = 0;            // calls per iteration in the current pattern
  int extra_calls = 0;       // calls in the span that are not part of the pattern
  uint32_t pattern_epoch = 0;  // increments each time a (new) period is detected
};

struct IterationTrackerOptions {
  PeriodOptions period;
  // Calls kept for detection: the most recent `window` calls (Falcon-style L).
  int window = 4096;
  // Detection needs at least this many buffered calls.
  int min_calls = 48;
  // After a failed detection, wait for retry_interval new calls before trying again; each
  // further failure doubles the wait, up to max(max_retry_interval, retry_interval) calls.
  // The wait returns to retry_interval when a signature never seen before arrives (the
  // stream changed, e.g. training started after initialisation) and when a pattern breaks
  // (a restart or reconfiguration). So a stream with no period costs about one detection
  // per max_retry_interval calls, not one per retry_interval.
  int retry_interval = 128;
  int max_retry_interval = 2048;
  // A span between two anchors may contain at most period * extra_fraction + extra_slack
  // calls beyond the pattern's.
  double extra_fraction = 0.25;
  int extra_slack = 4;
  // A span may also lack up to floor(period * missing_fraction) of the pattern's calls
  // (calls substituted by others, e.g. a logging call in place of a pattern call), in
  // keeping with the ACF's 0.95: a span that is 95% the pattern is an iteration.
  double missing_fraction = 0.05;
  // This many consecutive spans that do not match the template (or this many periods'
  // worth of calls without an anchor) break the pattern and trigger re-detection.
  int break_after = 3;
  // Detection may drop up to this fraction of the calls as extra calls (see
  // DropRareSymbols), trying at most max_drop_levels filter levels; dropped calls that
  // recur at the same place in most periods are put back into the pattern afterwards.
  double max_dropped_fraction = 0.25;
  int max_drop_levels = 4;
};

// Counters for observability.
struct IterationTrackerStats {
  uint64_t calls = 0;
  uint64_t samples = 0;
  uint64_t detections = 0;        // periods detected (including re-detections)
  uint64_t breaks = 0;            // patterns abandoned
  uint64_t rejected_spans = 0;    // anchor spans that did not match the template
  uint64_t detection_attempts = 0;
};

// Streaming iteration-time inference. Feed calls in stream order; each call to Add returns
// the iteration samples completed by that batch (possibly several for calls buffered while
// the period was being detected, in time order, never twice).
class IterationTracker {
 public:
  // Fails with kInvalidArgument naming the field when an option is out of range.
  static absl::StatusOr<IterationTracker> Create(const IterationTrackerOptions& options);

  std::vector<IterationSample> Add(absl::Span<const NcclCallRecord> calls);

  // The current period in calls, or 0 while none is established.
  int period() const { return period_; }
  const IterationTrackerStats& stats() const { return stats_; }

 private:
  struct Buffered {
    CallSignature signature;
    CallSymbol symbol;
    int64_t enter_ns;
    uint64_t position;  // 0-based position in the whole stream
  };
  explicit IterationTracker(const IterationTrackerOptions& options)
      : options_(options),
        current_retry_interval_(static_cast<uint64_t>(options.retry_interval)) {}
  void ResetRetryInterval() {
    current_retry_interval_ = static_cast<uint64_t>(options_.retry_interval);
  }

  CallSymbol Encode(const CallSignature& signature);
  // Detects a period on the buffered calls and establishes the template and anchor.
  bool TryDetect();
  // Scans buffered calls from scan_from_ for anchors and emits matching iterations.
  void Scan(std::vector<IterationSample>& out);
  void Break();
  void TrimBuffer();
  int MaxSpanCalls() const;

  IterationTrackerOptions options_;
  IterationTrackerStats stats_;
  // Signature -> code; rebuilt (and the buffer re-encoded) if it outgrows CallSymbol.
  std::unordered_map<CallSignature, CallSymbol, CallSignatureHash> codes_;
  std::deque<Buffered> buffer_;
  uint64_t next_position_ = 0;
  uint64_t calls_since_attempt_ = 0;
  bool attempt_pending_ = true;
  uint64_t current_retry_interval_ = 0;  // the backed-off wait; set by Create

  // The established pattern, valid while period_ > 0.
  int period_ = 0;
  uint32_t epoch_ = 0;
  std::vector<CallSymbol> template_;  // one period, rotated to start with the anchor
  int anchor_len_ = 0;                // the anchor is template_[0, anchor_len_)
  std::vector<char> in_template_;     // indexed by symbol
  size_t scan_from_ = 0;              // buffer index where scanning resumes
  std::vector<size_t> recent_;        // buffer indices of the last template calls (<= anchor_len_)
  std::vector<CallSymbol> span_symbols_;  // Scan's scratch: a span's template-symbol calls
  long last_anchor_ = -1;             // buffer index of the last anchor, -1 if none
  long calls_since_anchor_ = 0;
  uint64_t detected_at_position_ = 0;  // stream position when the pattern was detected
  int consecutive_rejects_ = 0;
  uint64_t last_emitted_end_ = 0;     // stream position + 1 of the last emitted sample's end
};

// Batch form: runs an IterationTracker over the whole sequence and returns every sample.
absl::StatusOr<std::vector<IterationSample>> InferIterationTimes(
    absl::Span<const NcclCallRecord> calls, const IterationTrackerOptions& options = {});

// Encodes calls to dense symbols in order of first appearance of each signature.
// Fails with kResourceExhausted when more distinct signatures occur than CallSymbol holds.
absl::StatusOr<std::vector<CallSymbol>> EncodeCallSignatures(
    absl::Span<const NcclCallRecord> calls);

// Candidate filters for extra calls. Calls that belong to the iteration pattern occur in
// every iteration, so each pattern signature's count is at least the number of iterations
// in the window; extra calls (logging, checkpoint barriers) are rarer. Level 0 keeps every
// call; level j >= 1 drops the signatures whose count is at most the j-th smallest distinct
// count, provided the dropped calls are at most max_dropped_fraction of all calls.
// Returns the positions (into `symbols`) that survive, in order, or std::nullopt when
// level j would drop more than that fraction (or there is no j-th distinct count).
std::optional<std::vector<size_t>> DropRareSymbols(absl::Span<const CallSymbol> symbols,
                                                   int level, double max_dropped_fraction);

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_ITERATION_PERIOD_H_
