// The node health state machine (node_lifecycle.h).
//
// A step runs in three parts so that an input delivered late is judged at the time it
// happened: the timers up to input.at, the input, the timers up to now. The timers are
//   - suspect: quiet (no bad reading) for suspect_clear_after since the last one -> healthy;
//   - sweeping: running for sweep_timeout -> the sweep failed (a failure at the timeout);
//   - failures older than failure_window are forgotten (not in retired: its history is
//     what retired it, and stays until an operator returns the machine).
// Temporal filtering of peer verdicts: a bad reading starts (healthy) or extends (suspect)
// an episode; the episode confirms, and quarantines the machine, once it holds
// confirm_count readings whose first and last are at least confirm_window apart. A burst
// inside one minute never confirms; readings that keep coming for the whole window do.
// A reading no newer than the last one counted is a repeat and ignored, which makes
// re-delivery harmless. Any input older than the current state's `since` (other than an
// operator's return) is stale and ignored: it was judged, or overtaken, when the state
// was entered.
//
// Failures (a fault eviction, a confirmed episode, a failed or timed-out sweep) are kept
// with their times; reaching retire_failures within failure_window retires the machine.
// A failed sweep that does not retire quarantines again, the next sweep after a back-off
// doubled per failure in the window. An over-eviction only asks for a short sweep.
#include "controller/core/node_lifecycle.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace peregrine {
namespace {

constexpr int64_t kMaxDurationNs = 365LL * 24 * 3600 * 1'000'000'000;
constexpr int kMaxConfirmCount = 1000;
constexpr int kMaxBadReadings = 1'000'000;  // the episode's count saturates here

int64_t SatAdd(int64_t a, int64_t b) {  // b >= 0
  return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}

std::string Dur(int64_t ns) { return absl::FormatDuration(absl::Trunc(absl::Nanoseconds(ns), absl::Seconds(1))); }

std::string Time(int64_t unix_ns) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixNanos(unix_ns), absl::UTCTimeZone());
}

// Cuts `text` to kMaxNodeHealthReason bytes at a UTF-8 boundary, ending in "...".
std::string Bounded(std::string text) {
  if (text.size() <= kMaxNodeHealthReason) return text;
  size_t cut = kMaxNodeHealthReason - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  text.resize(cut);
  text += "...";
  return text;
}

absl::Status CheckDuration(const char* field, int64_t value, bool zero_ok) {
  if (value < 0 || (value == 0 && !zero_ok) || value > kMaxDurationNs) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": must be ", zero_ok ? "at least 0" : "positive",
                                                   " and at most 365 days (in ns), got ", value));
  }
  return absl::OkStatus();
}

// One step's work on a copy of the record, collecting the actions.
class Stepper {
 public:
  Stepper(const NodeHealthRecord& record, const NodeLifecycleOptions& options, int64_t now)
      : r_(record), o_(options), now_(now) {}

  void RunTimers(int64_t t) {
    if (r_.state != NodeHealth::kRetired) PruneFailures(t);
    if (r_.state == NodeHealth::kSuspect && t >= SatAdd(r_.last_bad_at, o_.suspect_clear_after_ns)) {
      const int64_t at = SatAdd(r_.last_bad_at, o_.suspect_clear_after_ns);
      const std::string message =
          absl::StrCat("no bad reading for ", Dur(o_.suspect_clear_after_ns), " after ", r_.bad_readings,
                       " bad reading(s) from ", Time(r_.first_bad_at), " to ", Time(r_.last_bad_at),
                       " (fewer than ", o_.confirm_count, " spanning ", Dur(o_.confirm_window_ns), ")");
      Enter(NodeHealth::kHealthy, at, message);
      Event(false, "NodeSuspectCleared", message);
    }
    if (r_.state == NodeHealth::kSweeping && t >= SatAdd(r_.sweep_started_at, o_.sweep_timeout_ns)) {
      const int64_t at = SatAdd(r_.sweep_started_at, o_.sweep_timeout_ns);
      SweepFailed(at, absl::StrCat("sweep ", r_.sweep_attempts, " (", SweepKindName(r_.sweep_kind),
                                   ") timed out: running since ", Time(r_.sweep_started_at), " for ",
                                   Dur(o_.sweep_timeout_ns)));
    }
  }

  void Apply(const NodeInput& in, int64_t at) {
    // News from before the current state was entered is stale: the state already reflects
    // what happened since (and a timer that fired between the input and now would judge
    // the input differently on a second application).
    if (in.kind != NodeInputKind::kOperatorReturn && at < r_.since) return;
    switch (in.kind) {
      case NodeInputKind::kBadReading:
        BadReading(in.detail, at);
        return;
      case NodeInputKind::kFaultEviction:
        FaultEviction(in.detail, at);
        return;
      case NodeInputKind::kOverEviction:
        if (r_.state != NodeHealth::kHealthy && r_.state != NodeHealth::kSuspect) return;
        Quarantine(at, SweepKind::kShort,
                   absl::StrCat("over-evicted with its group (the culprit was elsewhere): ", in.detail,
                                "; short sweep, not counted as a failure"),
                   /*warning=*/false);
        return;
      case NodeInputKind::kSweepStarted:
        if (r_.state != NodeHealth::kQuarantined || in.sweep_attempt != r_.sweep_attempts + 1) return;
        {
          const SweepKind kind = r_.sweep_kind;
          const std::string message =
              absl::StrCat("sweep ", in.sweep_attempt, " (", SweepKindName(kind), ") started at ", Time(at));
          Enter(NodeHealth::kSweeping, at, message);
          r_.sweep_kind = kind;
          r_.sweep_attempts = in.sweep_attempt;
          r_.sweep_started_at = at;
          Event(false, "NodeSweepStarted", message);
        }
        return;
      case NodeInputKind::kSweepPassed:
        if (r_.state != NodeHealth::kSweeping || in.sweep_attempt != r_.sweep_attempts) return;
        {
          const std::string message =
              absl::StrCat("sweep ", in.sweep_attempt, " (", SweepKindName(r_.sweep_kind), ") passed after ",
                           Dur(at - r_.sweep_started_at), "; ", r_.failures.size(), " failure(s) within ",
                           Dur(o_.failure_window_ns), ", retired at ", o_.retire_failures);
          Enter(NodeHealth::kHealthy, at, message);
          Action(NodeActionKind::kUncordonAndUntaint);
          Event(false, "NodeHealthy", message);
        }
        return;
      case NodeInputKind::kSweepFailed:
        if (r_.state != NodeHealth::kSweeping || in.sweep_attempt != r_.sweep_attempts) return;
        SweepFailed(at, absl::StrCat("sweep ", in.sweep_attempt, " (", SweepKindName(r_.sweep_kind),
                                     ") failed: ", in.detail));
        return;
      case NodeInputKind::kSweepNotStarted:
        if (r_.state != NodeHealth::kQuarantined || in.sweep_attempt != r_.sweep_attempts + 1) return;
        {
          const std::string blocked = Bounded(in.detail.empty() ? "unknown reason" : in.detail);
          const int64_t due = SatAdd(at, o_.sweep_retry_ns);
          if (r_.sweep_blocked == blocked && r_.sweep_due_at == due) return;  // a repeat
          r_.sweep_blocked = blocked;
          r_.sweep_due_at = due;
          Event(true, "NodeSweepBlocked",
                absl::StrCat("sweep ", in.sweep_attempt, " (", SweepKindName(r_.sweep_kind),
                             ") could not start: ", blocked, "; next try at ", Time(due), " (in ",
                             Dur(o_.sweep_retry_ns), ")"));
        }
        return;
      case NodeInputKind::kOperatorReturn:
        OperatorReturn(in.detail, at);
        return;
      case NodeInputKind::kTick:
        return;
    }
  }

  // A quarantined machine whose sweep is due: ask for it (level-based, see the header).
  void RequestDueSweep(int64_t now) {
    if (r_.state != NodeHealth::kQuarantined || now < r_.sweep_due_at) return;
    NodeAction a;
    a.kind = NodeActionKind::kStartSweep;
    a.sweep_kind = r_.sweep_kind;
    a.sweep_attempt = r_.sweep_attempts + 1;
    actions_.push_back(std::move(a));
  }

  NodeLifecycleResult Take() && { return NodeLifecycleResult{std::move(r_), std::move(actions_)}; }

 private:
  static bool InService(NodeHealth s) { return s == NodeHealth::kHealthy || s == NodeHealth::kSuspect; }

  void PruneFailures(int64_t t) {
    const int64_t horizon = t - o_.failure_window_ns;  // keep those after it
    auto& f = r_.failures;
    f.erase(f.begin(), std::find_if(f.begin(), f.end(), [&](int64_t x) { return x > horizon; }));
  }

  void Action(NodeActionKind kind) {
    NodeAction a;
    a.kind = kind;
    actions_.push_back(std::move(a));
  }

  void Event(bool warning, std::string reason, std::string message) {
    NodeAction a;
    a.kind = NodeActionKind::kEvent;
    a.warning = warning;
    a.reason = std::move(reason);
    a.message = std::move(message);
    actions_.push_back(std::move(a));
  }

  // Moves to `state` at `at`, clearing the fields that belong to the old one.
  void Enter(NodeHealth state, int64_t at, const std::string& reason) {
    r_.state = state;
    r_.since = at;
    r_.reason = Bounded(reason);
    r_.bad_readings = 0;
    r_.first_bad_at = 0;
    r_.last_bad_at = 0;
    r_.sweep_kind = SweepKind::kFull;
    r_.sweep_due_at = 0;
    r_.sweep_started_at = 0;
    r_.sweep_blocked.clear();
  }

  // Records a failure at `at`; true when it retires the machine (then it is retired).
  bool CountFailure(int64_t at, const std::string& what) {
    auto pos = std::upper_bound(r_.failures.begin(), r_.failures.end(), at);
    r_.failures.insert(pos, at);
    PruneFailures(std::max(at, r_.failures.back()));
    if (r_.failures.size() > kMaxFailureHistory) {
      r_.failures.erase(r_.failures.begin(), r_.failures.end() - kMaxFailureHistory);
    }
    if (static_cast<int>(r_.failures.size()) < o_.retire_failures) return false;
    std::vector<std::string> times;
    for (int64_t f : r_.failures) times.push_back(Time(f));
    const bool was_in_service = InService(r_.state);
    const std::string message =
        absl::StrCat(what, "; ", r_.failures.size(), " failures within ", Dur(o_.failure_window_ns), " (",
                     absl::StrJoin(times, ", "), "), retire_failures ", o_.retire_failures,
                     ": retired until an operator returns it");
    Enter(NodeHealth::kRetired, at, message);
    if (was_in_service) Action(NodeActionKind::kCordonAndTaint);
    Action(NodeActionKind::kLabelRetired);
    Event(true, "NodeRetired", message);
    return true;
  }

  std::string FailureFigures() const {
    return absl::StrCat("failure ", r_.failures.size(), " of ", o_.retire_failures, " within ",
                        Dur(o_.failure_window_ns));
  }

  void Quarantine(int64_t at, SweepKind kind, const std::string& message, bool warning) {
    const bool was_in_service = InService(r_.state);
    Enter(NodeHealth::kQuarantined, at, message);
    r_.sweep_kind = kind;
    r_.sweep_due_at = at;
    if (was_in_service) Action(NodeActionKind::kCordonAndTaint);
    Event(warning, "NodeQuarantined", message);
  }

  void BadReading(const std::string& detail, int64_t at) {
    if (r_.state == NodeHealth::kHealthy) {
      // A reading so old that its episode would have cleared by now is no news.
      if (SatAdd(at, o_.suspect_clear_after_ns) <= now_) return;
      r_.state = NodeHealth::kSuspect;
      r_.since = at;
      r_.reason = Bounded(absl::StrCat("bad reading against its peers: ", detail));
      r_.bad_readings = 1;
      r_.first_bad_at = at;
      r_.last_bad_at = at;
      Event(false, "NodeSuspect",
            absl::StrCat("bad reading against its peers at ", Time(at), ": ", detail, "; quarantined after ",
                         o_.confirm_count, " spanning ", Dur(o_.confirm_window_ns),
                         ", cleared after ", Dur(o_.suspect_clear_after_ns), " without one"));
    } else if (r_.state == NodeHealth::kSuspect) {
      if (at <= r_.last_bad_at) return;  // a repeat (or older than one counted)
      r_.bad_readings = std::min(r_.bad_readings + 1, kMaxBadReadings);
      r_.last_bad_at = at;
    } else {
      return;  // out of service already
    }
    if (r_.bad_readings < o_.confirm_count || r_.last_bad_at - r_.first_bad_at < o_.confirm_window_ns) return;
    const std::string what = absl::StrCat(
        r_.bad_readings, " bad readings against its peers from ", Time(r_.first_bad_at), " to ",
        Time(r_.last_bad_at), " (", Dur(r_.last_bad_at - r_.first_bad_at), "; confirm_count ", o_.confirm_count,
        ", confirm_window ", Dur(o_.confirm_window_ns), "), last: ", detail);
    if (CountFailure(at, what)) return;
    Quarantine(at, SweepKind::kFull, absl::StrCat(what, "; ", FailureFigures()), /*warning=*/true);
  }

  void FaultEviction(const std::string& detail, int64_t at) {
    if (r_.state == NodeHealth::kQuarantined) {
      r_.sweep_kind = SweepKind::kFull;  // a short sweep pending is not enough now
      return;
    }
    if (!InService(r_.state)) return;
    const std::string what = absl::StrCat("evicted as the culprit: ", detail);
    if (CountFailure(at, what)) return;
    Quarantine(at, SweepKind::kFull, absl::StrCat(what, "; ", FailureFigures()), /*warning=*/true);
  }

  void SweepFailed(int64_t at, const std::string& what) {
    if (CountFailure(at, what)) return;
    // Back-off: sweep_backoff doubled per further failure in the window, capped.
    int64_t backoff = o_.sweep_backoff_ns;
    for (size_t i = 1; i < r_.failures.size() && backoff < o_.sweep_backoff_max_ns; ++i) backoff *= 2;
    backoff = std::min(backoff, o_.sweep_backoff_max_ns);
    const std::string message = absl::StrCat(what, "; ", FailureFigures(), "; next sweep at ",
                                             Time(SatAdd(at, backoff)), " (back-off ", Dur(backoff), ")");
    Enter(NodeHealth::kQuarantined, at, message);
    r_.sweep_kind = SweepKind::kFull;
    r_.sweep_due_at = SatAdd(at, backoff);
    Event(true, "NodeSweepFailed", message);
  }

  void OperatorReturn(const std::string& detail, int64_t at) {
    if (r_.state == NodeHealth::kHealthy && r_.failures.empty()) return;
    const bool out_of_service = !InService(r_.state);
    const std::string message =
        absl::StrCat("returned by operator from ", NodeHealthName(r_.state), " (", r_.failures.size(),
                     " failure(s) forgotten)", detail.empty() ? "" : ": ", detail);
    Enter(NodeHealth::kHealthy, at, message);
    r_.failures.clear();
    if (out_of_service) Action(NodeActionKind::kUncordonAndUntaint);
    Event(false, "NodeReturned", message);
  }

  NodeHealthRecord r_;
  const NodeLifecycleOptions& o_;
  const int64_t now_;
  std::vector<NodeAction> actions_;
};

}  // namespace

absl::string_view NodeHealthName(NodeHealth state) {
  switch (state) {
    case NodeHealth::kHealthy:
      return "healthy";
    case NodeHealth::kSuspect:
      return "suspect";
    case NodeHealth::kQuarantined:
      return "quarantined";
    case NodeHealth::kSweeping:
      return "sweeping";
    case NodeHealth::kRetired:
      return "retired";
  }
  return "unknown";
}

absl::StatusOr<NodeHealth> ParseNodeHealth(absl::string_view text) {
  for (NodeHealth s : {NodeHealth::kHealthy, NodeHealth::kSuspect, NodeHealth::kQuarantined, NodeHealth::kSweeping,
                       NodeHealth::kRetired}) {
    if (text == NodeHealthName(s)) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown node health \"", absl::CEscape(text),
                                                 "\" (want healthy, suspect, quarantined, sweeping or retired)"));
}

absl::string_view SweepKindName(SweepKind kind) { return kind == SweepKind::kShort ? "short" : "full"; }

absl::string_view NodeInputKindName(NodeInputKind kind) {
  switch (kind) {
    case NodeInputKind::kBadReading:
      return "bad reading";
    case NodeInputKind::kFaultEviction:
      return "fault eviction";
    case NodeInputKind::kOverEviction:
      return "over-eviction";
    case NodeInputKind::kSweepStarted:
      return "sweep started";
    case NodeInputKind::kSweepPassed:
      return "sweep passed";
    case NodeInputKind::kSweepFailed:
      return "sweep failed";
    case NodeInputKind::kSweepNotStarted:
      return "sweep not started";
    case NodeInputKind::kOperatorReturn:
      return "returned by operator";
    case NodeInputKind::kTick:
      return "tick";
  }
  return "unknown";
}

absl::Status ValidateNodeLifecycleOptions(const NodeLifecycleOptions& o) {
  if (absl::Status s = CheckDuration("confirm_window_ns", o.confirm_window_ns, true); !s.ok()) return s;
  if (o.confirm_count < 1 || o.confirm_count > kMaxConfirmCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("confirm_count: must be in [1, ", kMaxConfirmCount, "], got ", o.confirm_count));
  }
  if (absl::Status s = CheckDuration("suspect_clear_after_ns", o.suspect_clear_after_ns, false); !s.ok()) return s;
  if (o.retire_failures < 1 || o.retire_failures > static_cast<int>(kMaxFailureHistory)) {
    return absl::InvalidArgumentError(absl::StrCat("retire_failures: must be in [1, ", kMaxFailureHistory,
                                                   "], got ", o.retire_failures));
  }
  if (absl::Status s = CheckDuration("failure_window_ns", o.failure_window_ns, false); !s.ok()) return s;
  if (absl::Status s = CheckDuration("sweep_backoff_ns", o.sweep_backoff_ns, false); !s.ok()) return s;
  if (absl::Status s = CheckDuration("sweep_backoff_max_ns", o.sweep_backoff_max_ns, false); !s.ok()) return s;
  if (o.sweep_backoff_max_ns < o.sweep_backoff_ns) {
    return absl::InvalidArgumentError(absl::StrCat("sweep_backoff_max_ns: must be at least sweep_backoff_ns (",
                                                   o.sweep_backoff_ns, "), got ", o.sweep_backoff_max_ns));
  }
  if (absl::Status s = CheckDuration("sweep_retry_ns", o.sweep_retry_ns, false); !s.ok()) return s;
  if (absl::Status s = CheckDuration("sweep_timeout_ns", o.sweep_timeout_ns, false); !s.ok()) return s;
  return absl::OkStatus();
}

absl::StatusOr<NodeLifecycleResult> NodeLifecycleStep(const NodeHealthRecord& record, const NodeInput& input,
                                                      int64_t now, const NodeLifecycleOptions& options) {
  if (absl::Status s = ValidateNodeLifecycleOptions(options); !s.ok()) return s;
  if (now <= 0) return absl::InvalidArgumentError(absl::StrCat("now: must be positive, got ", now));
  if (input.kind != NodeInputKind::kTick && input.at <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("input.at: must be positive for a ", NodeInputKindName(input.kind), ", got ", input.at));
  }
  const bool about_sweep = input.kind == NodeInputKind::kSweepStarted || input.kind == NodeInputKind::kSweepPassed ||
                           input.kind == NodeInputKind::kSweepFailed ||
                           input.kind == NodeInputKind::kSweepNotStarted;
  if (about_sweep && input.sweep_attempt < 1) {
    return absl::InvalidArgumentError(absl::StrCat("input.sweep_attempt: must be at least 1 for a ",
                                                   NodeInputKindName(input.kind), ", got ", input.sweep_attempt));
  }
  const int64_t at = input.kind == NodeInputKind::kTick ? now : std::min(input.at, now);
  Stepper step(record, options, now);
  step.RunTimers(at);
  step.Apply(input, at);
  step.RunTimers(now);
  step.RequestDueSweep(now);
  return std::move(step).Take();
}

NodeHealthDesired DesiredNodeState(const NodeHealthRecord& record) {
  NodeHealthDesired d;
  d.cordoned_and_tainted = record.state == NodeHealth::kQuarantined || record.state == NodeHealth::kSweeping ||
                           record.state == NodeHealth::kRetired;
  d.retired = record.state == NodeHealth::kRetired;
  return d;
}

int64_t NextDueAt(const NodeHealthRecord& r, const NodeLifecycleOptions& o) {
  switch (r.state) {
    case NodeHealth::kSuspect:
      return SatAdd(r.last_bad_at, o.suspect_clear_after_ns);
    case NodeHealth::kQuarantined:
      return std::max<int64_t>(r.sweep_due_at, 1);
    case NodeHealth::kSweeping:
      return SatAdd(r.sweep_started_at, o.sweep_timeout_ns);
    case NodeHealth::kHealthy:
    case NodeHealth::kRetired:
      return 0;
  }
  return 0;
}

std::vector<DueWork> ListDueWork(const std::vector<NodeHealthRecord>& records, int64_t now,
                                 const NodeLifecycleOptions& options) {
  std::vector<DueWork> due;
  for (const NodeHealthRecord& r : records) {
    const int64_t at = NextDueAt(r, options);
    if (at == 0 || at > now) continue;
    DueWork w;
    w.node = r.node;
    w.due_at = at;
    w.kind = r.state == NodeHealth::kSuspect     ? DueWorkKind::kClearSuspect
             : r.state == NodeHealth::kSweeping ? DueWorkKind::kSweepTimedOut
                                                : DueWorkKind::kStartSweep;
    due.push_back(std::move(w));
  }
  return due;
}

std::array<int64_t, kNodeHealthStates> CountNodeHealth(const std::vector<NodeHealthRecord>& records) {
  std::array<int64_t, kNodeHealthStates> counts{};
  for (const NodeHealthRecord& r : records) ++counts[static_cast<size_t>(r.state)];
  return counts;
}

}  // namespace peregrine
