// The node health state machine on simulated time (controller/core/node_lifecycle.h):
// every transition, the temporal filtering of peer verdicts, over-eviction, retirement,
// operator return, due work and idempotence. The persisted form is in
// node_lifecycle_codec_test.cc.
#include "controller/core/node_lifecycle.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kMinute = 60 * kSecond;
constexpr int64_t kHour = 60 * kMinute;
constexpr int64_t kDay = 24 * kHour;
constexpr int64_t kT0 = 1'714'564'800LL * kSecond;  // 2024-05-01T12:00:00Z

bool Has(const std::vector<NodeAction>& actions, NodeActionKind kind) {
  return std::any_of(actions.begin(), actions.end(), [&](const NodeAction& a) { return a.kind == kind; });
}

const NodeAction* EventOf(const std::vector<NodeAction>& actions, const std::string& reason) {
  for (const NodeAction& a : actions) {
    if (a.kind == NodeActionKind::kEvent && a.reason == reason) return &a;
  }
  return nullptr;
}

const NodeAction* SweepOf(const std::vector<NodeAction>& actions) {
  for (const NodeAction& a : actions) {
    if (a.kind == NodeActionKind::kStartSweep) return &a;
  }
  return nullptr;
}

// One machine fed inputs at simulated times; `now` follows the inputs.
struct Machine {
  NodeLifecycleOptions options;
  NodeHealthRecord record;
  int64_t now = kT0;
  std::vector<NodeAction> actions;  // the last step's

  Machine() { record.node = "gpu-node-7"; }

  const std::vector<NodeAction>& Feed(NodeInputKind kind, int64_t at, std::string detail = "", int attempt = 0) {
    now = std::max(now, at);
    NodeInput in;
    in.kind = kind;
    in.at = at;
    in.detail = std::move(detail);
    in.sweep_attempt = attempt;
    absl::StatusOr<NodeLifecycleResult> r = NodeLifecycleStep(record, in, now, options);
    REQUIRE(r.ok());
    record = r->record;
    actions = r->actions;
    return actions;
  }
  const std::vector<NodeAction>& Tick(int64_t at) { return Feed(NodeInputKind::kTick, at); }
  const std::vector<NodeAction>& Bad(int64_t at) {
    return Feed(NodeInputKind::kBadReading, at, "fail-slow: rank 5 2.9x slower than its peers");
  }
  // Quarantines by a fault eviction at `at` and starts sweep 1.
  void QuarantineAndStartSweep(int64_t at) {
    Feed(NodeInputKind::kFaultEviction, at, "Xid 79 on GPU 3");
    REQUIRE(record.state == NodeHealth::kQuarantined);
    Feed(NodeInputKind::kSweepStarted, at, "", record.sweep_attempts + 1);
    REQUIRE(record.state == NodeHealth::kSweeping);
  }
};

TEST_CASE("node lifecycle: default options are valid and each invalid field is named", "[unit]") {
  REQUIRE(ValidateNodeLifecycleOptions(NodeLifecycleOptions{}).ok());
  struct Case {
    const char* field;
    void (*set)(NodeLifecycleOptions&);
  };
  const Case cases[] = {
      {"confirm_window_ns", [](NodeLifecycleOptions& o) { o.confirm_window_ns = -1; }},
      {"confirm_count", [](NodeLifecycleOptions& o) { o.confirm_count = 0; }},
      {"confirm_count", [](NodeLifecycleOptions& o) { o.confirm_count = 1001; }},
      {"suspect_clear_after_ns", [](NodeLifecycleOptions& o) { o.suspect_clear_after_ns = 0; }},
      {"retire_failures", [](NodeLifecycleOptions& o) { o.retire_failures = 0; }},
      {"retire_failures", [](NodeLifecycleOptions& o) { o.retire_failures = 17; }},
      {"failure_window_ns", [](NodeLifecycleOptions& o) { o.failure_window_ns = 366 * kDay; }},
      {"sweep_backoff_ns", [](NodeLifecycleOptions& o) { o.sweep_backoff_ns = -kSecond; }},
      {"sweep_backoff_max_ns", [](NodeLifecycleOptions& o) { o.sweep_backoff_max_ns = kMinute; }},
      {"sweep_retry_ns", [](NodeLifecycleOptions& o) { o.sweep_retry_ns = 0; }},
      {"sweep_timeout_ns", [](NodeLifecycleOptions& o) { o.sweep_timeout_ns = 0; }},
  };
  for (const Case& c : cases) {
    NodeLifecycleOptions o;
    c.set(o);
    const absl::Status s = ValidateNodeLifecycleOptions(o);
    INFO(c.field << ": " << s);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StartsWith(s.message(), absl::StrCat(c.field, ":")));
    // Step refuses invalid options the same way.
    absl::StatusOr<NodeLifecycleResult> r = NodeLifecycleStep(NodeHealthRecord{}, NodeInput{}, kT0, o);
    CHECK(r.status() == s);
  }
  NodeLifecycleOptions zero_window;
  zero_window.confirm_window_ns = 0;
  CHECK(ValidateNodeLifecycleOptions(zero_window).ok());
}

TEST_CASE("node lifecycle: invalid inputs are refused naming the field", "[unit]") {
  const NodeLifecycleOptions o;
  NodeInput in;
  in.kind = NodeInputKind::kBadReading;
  in.at = 0;
  absl::StatusOr<NodeLifecycleResult> r = NodeLifecycleStep(NodeHealthRecord{}, in, kT0, o);
  REQUIRE(!r.ok());
  CHECK(absl::StartsWith(r.status().message(), "input.at:"));
  in.kind = NodeInputKind::kSweepPassed;
  in.at = kT0;
  r = NodeLifecycleStep(NodeHealthRecord{}, in, kT0, o);
  REQUIRE(!r.ok());
  CHECK(absl::StartsWith(r.status().message(), "input.sweep_attempt:"));
  r = NodeLifecycleStep(NodeHealthRecord{}, NodeInput{}, 0, o);
  REQUIRE(!r.ok());
  CHECK(absl::StartsWith(r.status().message(), "now:"));
}

TEST_CASE("node lifecycle: one bad minute is no verdict, three bad readings spanning 5 min quarantine", "[unit]") {
  Machine m;
  m.Bad(kT0);
  CHECK(m.record.state == NodeHealth::kSuspect);
  CHECK(m.record.bad_readings == 1);
  const NodeAction* e = EventOf(m.actions, "NodeSuspect");
  REQUIRE(e != nullptr);
  CHECK_THAT(e->message, Catch::Contains("rank 5 2.9x slower"));
  CHECK_FALSE(Has(m.actions, NodeActionKind::kCordonAndTaint));
  // A burst: a reading every 10 s for the rest of the minute. Many readings, no span.
  for (int s = 10; s <= 60; s += 10) {
    m.Bad(kT0 + s * kSecond);
    CHECK(m.record.state == NodeHealth::kSuspect);
    CHECK_FALSE(Has(m.actions, NodeActionKind::kCordonAndTaint));
  }
  CHECK(m.record.bad_readings == 7);
  // Quiet for 15 minutes after the last one: healthy again, the episode forgotten.
  m.Tick(kT0 + kMinute + 15 * kMinute - kSecond);
  CHECK(m.record.state == NodeHealth::kSuspect);
  m.Tick(kT0 + kMinute + 15 * kMinute);
  CHECK(m.record.state == NodeHealth::kHealthy);
  CHECK(m.record.bad_readings == 0);
  CHECK(m.record.failures.empty());
  e = EventOf(m.actions, "NodeSuspectCleared");
  REQUIRE(e != nullptr);
  CHECK_THAT(e->message, Catch::Contains("7 bad reading(s)"));
  CHECK_THAT(e->message, Catch::Contains("no bad reading for 15m"));

  // A new episode: readings at 0, 2.5 and 5 minutes of it.
  const int64_t t1 = kT0 + kHour;
  m.Bad(t1);
  CHECK(m.record.bad_readings == 1);
  m.Bad(t1 + 150 * kSecond);
  CHECK(m.record.state == NodeHealth::kSuspect);
  m.Bad(t1 + 5 * kMinute);
  CHECK(m.record.state == NodeHealth::kQuarantined);
  CHECK(Has(m.actions, NodeActionKind::kCordonAndTaint));
  e = EventOf(m.actions, "NodeQuarantined");
  REQUIRE(e != nullptr);
  CHECK(e->warning);
  CHECK_THAT(e->message, Catch::Contains("3 bad readings against its peers from 2024-05-01T13:00:00Z to "
                                         "2024-05-01T13:05:00Z"));
  CHECK_THAT(e->message, Catch::Contains("confirm_count 3, confirm_window 5m"));
  CHECK_THAT(e->message, Catch::Contains("failure 1 of 3 within 168h"));
  const NodeAction* sweep = SweepOf(m.actions);
  REQUIRE(sweep != nullptr);
  CHECK(sweep->sweep_kind == SweepKind::kFull);
  CHECK(sweep->sweep_attempt == 1);
  CHECK(m.record.failures == std::vector<int64_t>{t1 + 5 * kMinute});
  CHECK(DesiredNodeState(m.record).cordoned_and_tainted);
}

TEST_CASE("node lifecycle: readings spanning the window but fewer than confirm_count do not quarantine", "[unit]") {
  Machine m;
  m.Bad(kT0);
  m.Bad(kT0 + 10 * kMinute);
  CHECK(m.record.state == NodeHealth::kSuspect);
  CHECK(m.record.bad_readings == 2);
  // A stale reading (older than one counted) and a repeat change nothing.
  m.Bad(kT0 + 5 * kMinute);
  m.Bad(kT0 + 10 * kMinute);
  CHECK(m.record.bad_readings == 2);
  m.Bad(kT0 + 11 * kMinute);
  CHECK(m.record.state == NodeHealth::kQuarantined);
}

TEST_CASE("node lifecycle: a reading delivered late is judged at its time", "[unit]") {
  Machine m;
  // A reading from 20 minutes ago: its episode would have cleared already.
  m.now = kT0 + 20 * kMinute;
  m.Bad(kT0);
  CHECK(m.record.state == NodeHealth::kHealthy);
  CHECK(m.actions.empty());
  // One from 5 minutes ago makes the machine suspect since then.
  m.Bad(kT0 + 15 * kMinute);
  CHECK(m.record.state == NodeHealth::kSuspect);
  CHECK(m.record.since == kT0 + 15 * kMinute);
  // An input from the future is taken as now.
  NodeInput future;
  future.kind = NodeInputKind::kBadReading;
  future.at = m.now + kHour;
  absl::StatusOr<NodeLifecycleResult> r = NodeLifecycleStep(m.record, future, m.now, m.options);
  REQUIRE(r.ok());
  CHECK(r->record.last_bad_at == m.now);
  CHECK(r->record.bad_readings == 2);
}

TEST_CASE("node lifecycle: confirm_count 1 and confirm_window 0 quarantine on the first reading", "[unit]") {
  Machine m;
  m.options.confirm_count = 1;
  m.options.confirm_window_ns = 0;
  m.Bad(kT0);
  CHECK(m.record.state == NodeHealth::kQuarantined);
  CHECK(Has(m.actions, NodeActionKind::kCordonAndTaint));
  CHECK(EventOf(m.actions, "NodeSuspect") != nullptr);
  CHECK(EventOf(m.actions, "NodeQuarantined") != nullptr);
}

TEST_CASE("node lifecycle: a fault eviction quarantines at once, counts a failure and asks for a full sweep", "[unit]") {
  for (NodeHealth from : {NodeHealth::kHealthy, NodeHealth::kSuspect}) {
    Machine m;
    if (from == NodeHealth::kSuspect) m.Bad(kT0 - kMinute);
    REQUIRE(m.record.state == from);
    m.Feed(NodeInputKind::kFaultEviction, kT0, "Xid 79 on GPU 3");
    CHECK(m.record.state == NodeHealth::kQuarantined);
    CHECK(m.record.bad_readings == 0);
    CHECK(m.record.failures == std::vector<int64_t>{kT0});
    CHECK(Has(m.actions, NodeActionKind::kCordonAndTaint));
    const NodeAction* sweep = SweepOf(m.actions);
    REQUIRE(sweep != nullptr);
    CHECK(sweep->sweep_kind == SweepKind::kFull);
    const NodeAction* e = EventOf(m.actions, "NodeQuarantined");
    REQUIRE(e != nullptr);
    CHECK_THAT(e->message, Catch::Contains("evicted as the culprit: Xid 79 on GPU 3; failure 1 of 3"));
  }
}

TEST_CASE("node lifecycle: an over-eviction asks for a short sweep and counts no failure", "[unit]") {
  Machine m;
  m.Feed(NodeInputKind::kOverEviction, kT0, "stack aggregation over-evicted pipeline group 1");
  CHECK(m.record.state == NodeHealth::kQuarantined);
  CHECK(m.record.failures.empty());
  CHECK(Has(m.actions, NodeActionKind::kCordonAndTaint));
  const NodeAction* sweep = SweepOf(m.actions);
  REQUIRE(sweep != nullptr);
  CHECK(sweep->sweep_kind == SweepKind::kShort);
  const NodeAction* e = EventOf(m.actions, "NodeQuarantined");
  REQUIRE(e != nullptr);
  CHECK_FALSE(e->warning);
  CHECK_THAT(e->message, Catch::Contains("not counted as a failure"));
  m.Feed(NodeInputKind::kSweepStarted, kT0 + kMinute, "", 1);
  CHECK(m.record.sweep_kind == SweepKind::kShort);
  m.Feed(NodeInputKind::kSweepPassed, kT0 + 3 * kMinute, "", 1);
  CHECK(m.record.state == NodeHealth::kHealthy);
  CHECK(m.record.failures.empty());
  CHECK(Has(m.actions, NodeActionKind::kUncordonAndUntaint));

  SECTION("a fault eviction while the short sweep is pending makes it full, once") {
    Machine q;
    q.Feed(NodeInputKind::kOverEviction, kT0, "group");
    q.Feed(NodeInputKind::kFaultEviction, kT0 + kSecond, "Xid 48");
    CHECK(q.record.sweep_kind == SweepKind::kFull);
    CHECK(q.record.failures.empty());  // the machine is out of service already
    REQUIRE(SweepOf(q.actions) != nullptr);
    CHECK(SweepOf(q.actions)->sweep_kind == SweepKind::kFull);
  }
}

TEST_CASE("node lifecycle: a sweep that passes returns the machine to healthy and keeps its failures", "[unit]") {
  Machine m;
  m.QuarantineAndStartSweep(kT0);
  CHECK(EventOf(m.actions, "NodeSweepStarted") != nullptr);
  CHECK(m.record.sweep_started_at == kT0);
  CHECK(SweepOf(m.actions) == nullptr);  // started: no longer asked for
  m.Feed(NodeInputKind::kSweepPassed, kT0 + 20 * kMinute, "", 1);
  CHECK(m.record.state == NodeHealth::kHealthy);
  CHECK(m.record.sweep_started_at == 0);
  CHECK(m.record.sweep_attempts == 1);
  CHECK(m.record.failures == std::vector<int64_t>{kT0});
  CHECK(Has(m.actions, NodeActionKind::kUncordonAndUntaint));
  const NodeAction* e = EventOf(m.actions, "NodeHealthy");
  REQUIRE(e != nullptr);
  CHECK_THAT(e->message, Catch::Contains("sweep 1 (full) passed after 20m; 1 failure(s) within 168h"));
  CHECK_FALSE(DesiredNodeState(m.record).cordoned_and_tainted);
  // The next quarantine's sweep is attempt 2: (node, attempt) names one sweep.
  m.Feed(NodeInputKind::kOverEviction, kT0 + kHour, "group");
  REQUIRE(SweepOf(m.actions) != nullptr);
  CHECK(SweepOf(m.actions)->sweep_attempt == 2);
}

TEST_CASE("node lifecycle: a failed sweep quarantines again after a doubling back-off", "[unit]") {
  Machine m;
  m.options.retire_failures = 5;
  m.QuarantineAndStartSweep(kT0);  // failure 1
  m.Feed(NodeInputKind::kSweepFailed, kT0 + 10 * kMinute, "dcgmi diag level 3: PCIe replay errors", 1);
  CHECK(m.record.state == NodeHealth::kQuarantined);
  CHECK(m.record.failures.size() == 2);
  CHECK(m.record.sweep_due_at == kT0 + 10 * kMinute + 20 * kMinute);  // 10 min doubled once
  CHECK_FALSE(Has(m.actions, NodeActionKind::kCordonAndTaint));      // still cordoned
  CHECK(SweepOf(m.actions) == nullptr);
  const NodeAction* e = EventOf(m.actions, "NodeSweepFailed");
  REQUIRE(e != nullptr);
  CHECK_THAT(e->message, Catch::Contains("sweep 1 (full) failed: dcgmi diag level 3: PCIe replay errors; "
                                         "failure 2 of 5 within 168h; next sweep at 2024-05-01T12:30:00Z "
                                         "(back-off 20m)"));
  // Not due yet; due at the back-off's end, asked for on every step until it starts.
  CHECK(ListDueWork({m.record}, kT0 + 29 * kMinute, m.options).empty());
  CHECK(NextDueAt(m.record, m.options) == kT0 + 30 * kMinute);
  m.Tick(kT0 + 29 * kMinute);
  CHECK(SweepOf(m.actions) == nullptr);
  const std::vector<DueWork> due = ListDueWork({m.record}, kT0 + 30 * kMinute, m.options);
  REQUIRE(due.size() == 1);
  CHECK(due[0].node == "gpu-node-7");
  CHECK(due[0].kind == DueWorkKind::kStartSweep);
  CHECK(due[0].due_at == kT0 + 30 * kMinute);
  for (int i = 0; i < 2; ++i) {
    const NodeHealthRecord before = m.record;
    m.Tick(kT0 + 30 * kMinute + i * kMinute);
    CHECK(m.record == before);
    REQUIRE(SweepOf(m.actions) != nullptr);
    CHECK(SweepOf(m.actions)->sweep_attempt == 2);
    CHECK(SweepOf(m.actions)->sweep_kind == SweepKind::kFull);
  }
  m.Feed(NodeInputKind::kSweepStarted, kT0 + 31 * kMinute, "", 2);
  m.Feed(NodeInputKind::kSweepFailed, kT0 + 40 * kMinute, "gemm 40% below its peers", 2);
  CHECK(m.record.sweep_due_at == kT0 + 40 * kMinute + 40 * kMinute);  // doubled twice

  SECTION("the back-off stops at sweep_backoff_max") {
    m.options.sweep_backoff_max_ns = 45 * kMinute;
    m.Tick(m.record.sweep_due_at);
    m.Feed(NodeInputKind::kSweepStarted, m.now, "", 3);
    m.Feed(NodeInputKind::kSweepFailed, m.now + kMinute, "again", 3);
    CHECK(m.record.failures.size() == 4);
    CHECK(m.record.sweep_due_at == m.now + 45 * kMinute);
  }
}

TEST_CASE("node lifecycle: a sweep that cannot start keeps the machine quarantined with the reason", "[unit]") {
  Machine m;
  m.Feed(NodeInputKind::kFaultEviction, kT0, "Xid 79");
  m.Feed(NodeInputKind::kSweepNotStarted, kT0 + kSecond, "no image: ErrImagePull registry.local/sweep:1", 1);
  CHECK(m.record.state == NodeHealth::kQuarantined);
  CHECK(m.record.sweep_blocked == "no image: ErrImagePull registry.local/sweep:1");
  CHECK(m.record.sweep_due_at == kT0 + kSecond + 5 * kMinute);
  CHECK(m.record.sweep_attempts == 0);
  CHECK(m.record.failures.size() == 1);  // not the machine's failure
  CHECK(SweepOf(m.actions) == nullptr);
  const NodeAction* e = EventOf(m.actions, "NodeSweepBlocked");
  REQUIRE(e != nullptr);
  CHECK(e->warning);
  CHECK_THAT(e->message, Catch::Contains("sweep 1 (full) could not start: no image"));
  // A different reason replaces it; the next try is attempt 1 again.
  m.Feed(NodeInputKind::kSweepNotStarted, kT0 + 2 * kSecond, "unschedulable: 0/12 nodes available", 1);
  CHECK(m.record.sweep_blocked == "unschedulable: 0/12 nodes available");
  m.Tick(m.record.sweep_due_at);
  REQUIRE(SweepOf(m.actions) != nullptr);
  CHECK(SweepOf(m.actions)->sweep_attempt == 1);
  m.Feed(NodeInputKind::kSweepStarted, m.now, "", 1);
  CHECK(m.record.state == NodeHealth::kSweeping);
  CHECK(m.record.sweep_blocked.empty());
}

TEST_CASE("node lifecycle: a sweep running past its timeout fails", "[unit]") {
  Machine m;
  m.QuarantineAndStartSweep(kT0);
  CHECK(ListDueWork({m.record}, kT0 + 2 * kHour - 1, m.options).empty());
  const std::vector<DueWork> due = ListDueWork({m.record}, kT0 + 2 * kHour, m.options);
  REQUIRE(due.size() == 1);
  CHECK(due[0].kind == DueWorkKind::kSweepTimedOut);
  m.Tick(kT0 + 3 * kHour);
  CHECK(m.record.state == NodeHealth::kQuarantined);
  CHECK(m.record.failures == std::vector<int64_t>{kT0, kT0 + 2 * kHour});
  const NodeAction* e = EventOf(m.actions, "NodeSweepFailed");
  REQUIRE(e != nullptr);
  CHECK_THAT(e->message, Catch::Contains("sweep 1 (full) timed out"));
  // The late result of the timed-out sweep is ignored.
  const NodeHealthRecord before = m.record;
  m.Feed(NodeInputKind::kSweepPassed, kT0 + 3 * kHour, "", 1);
  CHECK(m.record == before);
}

TEST_CASE("node lifecycle: K failures within D days retire the machine", "[unit]") {
  Machine m;
  m.QuarantineAndStartSweep(kT0);                                     // failure 1: the eviction
  m.Feed(NodeInputKind::kSweepFailed, kT0 + kHour, "ecc errors", 1);  // failure 2
  m.Tick(m.record.sweep_due_at);
  m.Feed(NodeInputKind::kSweepStarted, m.now, "", 2);
  m.Feed(NodeInputKind::kSweepFailed, m.now + kHour, "ecc errors", 2);  // failure 3
  CHECK(m.record.state == NodeHealth::kRetired);
  CHECK(m.record.failures.size() == 3);
  CHECK(Has(m.actions, NodeActionKind::kLabelRetired));
  CHECK_FALSE(Has(m.actions, NodeActionKind::kCordonAndTaint));  // it is cordoned already
  CHECK_FALSE(Has(m.actions, NodeActionKind::kUncordonAndUntaint));
  const NodeAction* e = EventOf(m.actions, "NodeRetired");
  REQUIRE(e != nullptr);
  CHECK(e->warning);
  CHECK_THAT(e->message, Catch::Contains("3 failures within 168h (2024-05-01T12:00:00Z, "));
  CHECK_THAT(e->message, Catch::Contains("retire_failures 3"));
  CHECK(DesiredNodeState(m.record).retired);
  CHECK(DesiredNodeState(m.record).cordoned_and_tainted);

  SECTION("a third fault eviction of a machine in service retires it and cordons it") {
    Machine r;
    for (int i = 0; i < 3; ++i) {
      r.Feed(NodeInputKind::kFaultEviction, kT0 + i * kDay, "Xid 79");
      if (i < 2) {
        r.Feed(NodeInputKind::kSweepStarted, kT0 + i * kDay, "", i + 1);
        r.Feed(NodeInputKind::kSweepPassed, kT0 + i * kDay + kHour, "", i + 1);
        REQUIRE(r.record.state == NodeHealth::kHealthy);
      }
    }
    CHECK(r.record.state == NodeHealth::kRetired);
    CHECK(Has(r.actions, NodeActionKind::kCordonAndTaint));
    CHECK(Has(r.actions, NodeActionKind::kLabelRetired));
    CHECK(SweepOf(r.actions) == nullptr);
  }
}

TEST_CASE("node lifecycle: K failures spread over more than D days do not retire", "[unit]") {
  Machine m;
  for (int i = 0; i < 3; ++i) {
    const int64_t t = kT0 + i * 4 * kDay;  // days 0, 4, 8: never 3 within 7 days
    m.Feed(NodeInputKind::kFaultEviction, t, "Xid 79");
    CHECK(m.record.state == NodeHealth::kQuarantined);
    m.Feed(NodeInputKind::kSweepStarted, t, "", i + 1);
    m.Feed(NodeInputKind::kSweepPassed, t + kHour, "", i + 1);
    CHECK(m.record.state == NodeHealth::kHealthy);
  }
  CHECK(m.record.failures == std::vector<int64_t>{kT0 + 4 * kDay, kT0 + 8 * kDay});
  // The history is forgotten as it ages out.
  m.Tick(kT0 + 15 * kDay + 1);
  CHECK(m.record.failures.empty());
}

TEST_CASE("node lifecycle: a retired machine never returns automatically, an operator returns it", "[unit]") {
  Machine m;
  m.options.retire_failures = 1;
  m.Feed(NodeInputKind::kFaultEviction, kT0, "Xid 79");
  REQUIRE(m.record.state == NodeHealth::kRetired);
  const NodeHealthRecord retired = m.record;
  int64_t t = kT0;
  for (NodeInputKind kind : {NodeInputKind::kTick, NodeInputKind::kBadReading, NodeInputKind::kFaultEviction,
                             NodeInputKind::kOverEviction, NodeInputKind::kSweepStarted,
                             NodeInputKind::kSweepPassed, NodeInputKind::kSweepFailed,
                             NodeInputKind::kSweepNotStarted}) {
    for (int attempt = 1; attempt <= 2; ++attempt) {
      t += 30 * kDay;
      m.Feed(kind, t, "x", attempt);
      CHECK(m.record == retired);
      CHECK(m.actions.empty());
    }
  }
  CHECK(ListDueWork({m.record}, t + 365 * kDay, m.options).empty());
  CHECK(NextDueAt(m.record, m.options) == 0);

  m.Feed(NodeInputKind::kOperatorReturn, t + kDay, "RMA: replaced GPU 3 (ticket HW-1182)");
  CHECK(m.record.state == NodeHealth::kHealthy);
  CHECK(m.record.failures.empty());
  CHECK(Has(m.actions, NodeActionKind::kUncordonAndUntaint));
  const NodeAction* e = EventOf(m.actions, "NodeReturned");
  REQUIRE(e != nullptr);
  CHECK_THAT(e->message, Catch::Contains("returned by operator from retired (1 failure(s) forgotten): RMA"));
  CHECK_FALSE(DesiredNodeState(m.record).retired);
  // Returned twice: nothing more.
  m.Feed(NodeInputKind::kOperatorReturn, t + kDay, "RMA: replaced GPU 3 (ticket HW-1182)");
  CHECK(m.actions.empty());
}

TEST_CASE("node lifecycle: an operator return from each state", "[unit]") {
  struct Case {
    const char* name;
    void (*setup)(Machine&);
    NodeHealth from;
    bool uncordon;
  };
  const Case cases[] = {
      {"suspect", [](Machine& m) { m.Bad(kT0); }, NodeHealth::kSuspect, false},
      {"quarantined", [](Machine& m) { m.Feed(NodeInputKind::kFaultEviction, kT0, "Xid"); },
       NodeHealth::kQuarantined, true},
      {"sweeping", [](Machine& m) { m.QuarantineAndStartSweep(kT0); }, NodeHealth::kSweeping, true},
      {"healthy with failures",
       [](Machine& m) {
         m.QuarantineAndStartSweep(kT0);
         m.Feed(NodeInputKind::kSweepPassed, kT0, "", 1);
       },
       NodeHealth::kHealthy, false},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    Machine m;
    c.setup(m);
    REQUIRE(m.record.state == c.from);
    m.Feed(NodeInputKind::kOperatorReturn, kT0 + kMinute, "");
    CHECK(m.record.state == NodeHealth::kHealthy);
    CHECK(m.record.failures.empty());
    CHECK(m.record.bad_readings == 0);
    CHECK(Has(m.actions, NodeActionKind::kUncordonAndUntaint) == c.uncordon);
    CHECK(EventOf(m.actions, "NodeReturned") != nullptr);
    // A sweep that was running when the machine was returned reports late: ignored.
    const NodeHealthRecord before = m.record;
    m.Feed(NodeInputKind::kSweepFailed, kT0 + 2 * kMinute, "late", 1);
    CHECK(m.record == before);
  }
}

TEST_CASE("node lifecycle: sweep inputs about another attempt or state are ignored", "[unit]") {
  Machine m;
  m.Feed(NodeInputKind::kFaultEviction, kT0, "Xid");
  const NodeHealthRecord quarantined = m.record;
  for (NodeInputKind kind : {NodeInputKind::kSweepPassed, NodeInputKind::kSweepFailed}) {
    m.Feed(kind, kT0, "", 1);  // not started yet
    CHECK(m.record == quarantined);
  }
  m.Feed(NodeInputKind::kSweepStarted, kT0, "", 2);  // not the next attempt
  CHECK(m.record == quarantined);
  m.Feed(NodeInputKind::kSweepStarted, kT0, "", 1);
  const NodeHealthRecord sweeping = m.record;
  for (NodeInputKind kind : {NodeInputKind::kSweepPassed, NodeInputKind::kSweepFailed,
                             NodeInputKind::kSweepStarted, NodeInputKind::kSweepNotStarted}) {
    m.Feed(kind, kT0 + kSecond, "", 7);
    CHECK(m.record == sweeping);
    CHECK(m.actions.empty());
  }
  // Healthy machines ignore sweep news too.
  Machine h;
  h.Feed(NodeInputKind::kSweepPassed, kT0, "", 1);
  CHECK(h.record.state == NodeHealth::kHealthy);
  CHECK(h.actions.empty());
}

// Applying any input a second time to the record it produced changes nothing and acts only
// by repeating the level-based kStartSweep.
TEST_CASE("node lifecycle: applying the same input twice is harmless (random walks)", "[unit]") {
  std::mt19937_64 rng(20240501);
  const std::vector<NodeInputKind> kinds = {
      NodeInputKind::kBadReading,   NodeInputKind::kBadReading,  NodeInputKind::kBadReading,
      NodeInputKind::kFaultEviction, NodeInputKind::kOverEviction, NodeInputKind::kSweepStarted,
      NodeInputKind::kSweepPassed,  NodeInputKind::kSweepFailed, NodeInputKind::kSweepNotStarted,
      NodeInputKind::kOperatorReturn, NodeInputKind::kTick};
  NodeLifecycleOptions options;
  int seen[kNodeHealthStates] = {};
  for (int walk = 0; walk < 200; ++walk) {
    NodeHealthRecord record;
    record.node = "n";
    int64_t now = kT0;
    for (int step = 0; step < 60; ++step) {
      now += static_cast<int64_t>(rng() % (40 * kMinute));
      NodeInput in;
      in.kind = kinds[rng() % kinds.size()];
      if (in.kind == NodeInputKind::kOperatorReturn && rng() % 4 != 0) in.kind = NodeInputKind::kTick;
      in.at = now - static_cast<int64_t>(rng() % (2 * kMinute));
      in.detail = "d";
      in.sweep_attempt = record.sweep_attempts + (in.kind == NodeInputKind::kSweepStarted ||
                                                          in.kind == NodeInputKind::kSweepNotStarted
                                                      ? 1
                                                      : 0);
      if (in.sweep_attempt < 1) in.sweep_attempt = 1;
      absl::StatusOr<NodeLifecycleResult> first = NodeLifecycleStep(record, in, now, options);
      REQUIRE(first.ok());
      absl::StatusOr<NodeLifecycleResult> again = NodeLifecycleStep(first->record, in, now, options);
      REQUIRE(again.ok());
      INFO("walk " << walk << " step " << step << " input " << NodeInputKindName(in.kind));
      CHECK(again->record == first->record);
      for (const NodeAction& a : again->actions) CHECK(a.kind == NodeActionKind::kStartSweep);
      CHECK(again->actions.size() <= 1);
      // Invariants the persisted form relies on.
      CHECK(first->record.failures.size() <= kMaxFailureHistory);
      CHECK(std::is_sorted(first->record.failures.begin(), first->record.failures.end()));
      CHECK((first->record.state == NodeHealth::kSuspect) == (first->record.bad_readings > 0));
      record = first->record;
      ++seen[static_cast<size_t>(record.state)];
    }
  }
  for (size_t s = 0; s < kNodeHealthStates; ++s) CHECK(seen[s] > 0);  // every state visited
}

TEST_CASE("node lifecycle: counts per state and due work over many machines", "[unit]") {
  NodeLifecycleOptions o;
  std::vector<NodeHealthRecord> records(6);
  records[0].node = "a";  // healthy
  records[1].node = "b";
  records[1].state = NodeHealth::kSuspect;
  records[1].bad_readings = 1;
  records[1].first_bad_at = records[1].last_bad_at = kT0;
  records[2].node = "c";
  records[2].state = NodeHealth::kQuarantined;
  records[2].sweep_due_at = kT0 + kHour;
  records[3].node = "d";
  records[3].state = NodeHealth::kQuarantined;
  records[3].sweep_due_at = kT0;
  records[4].node = "e";
  records[4].state = NodeHealth::kSweeping;
  records[4].sweep_attempts = 1;
  records[4].sweep_started_at = kT0 - 3 * kHour;
  records[5].node = "f";
  records[5].state = NodeHealth::kRetired;
  const std::array<int64_t, kNodeHealthStates> counts = CountNodeHealth(records);
  CHECK(counts == std::array<int64_t, kNodeHealthStates>{1, 1, 2, 1, 1});
  CHECK(std::string(kNodeHealthMachinesMetric) == "peregrine_node_health_machines");
  const std::vector<DueWork> due = ListDueWork(records, kT0 + 15 * kMinute, o);
  REQUIRE(due.size() == 3);
  CHECK(due[0].node == "b");
  CHECK(due[0].kind == DueWorkKind::kClearSuspect);
  CHECK(due[1].node == "d");
  CHECK(due[1].kind == DueWorkKind::kStartSweep);
  CHECK(due[2].node == "e");
  CHECK(due[2].kind == DueWorkKind::kSweepTimedOut);
}

TEST_CASE("node lifecycle: names parse back and unknown ones are refused", "[unit]") {
  for (NodeHealth s : {NodeHealth::kHealthy, NodeHealth::kSuspect, NodeHealth::kQuarantined, NodeHealth::kSweeping,
                       NodeHealth::kRetired}) {
    absl::StatusOr<NodeHealth> p = ParseNodeHealth(NodeHealthName(s));
    REQUIRE(p.ok());
    CHECK(*p == s);
  }
  CHECK_FALSE(ParseNodeHealth("Healthy").ok());
  CHECK_FALSE(ParseNodeHealth("").ok());
  CHECK(std::string(kQuarantineTaintKey) == "peregrine.dev/quarantined");
  CHECK(std::string(kQuarantineTaintEffect) == "NoSchedule");
}

}  // namespace
}  // namespace peregrine
