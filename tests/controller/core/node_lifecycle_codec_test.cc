// The node health record as Node metadata (node_lifecycle.h EncodeNodeHealth /
// DecodeNodeHealth): real-looking samples as kubectl shows them, garbage of every kind
// (each error names the key), and round trips of random records and of records the state
// machine produces.
#include <catch2/catch.hpp>

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "controller/core/node_lifecycle.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kT0 = 1'714'564'800LL * kSecond;  // 2024-05-01T12:00:00Z

using Map = std::map<std::string, std::string>;

const Map kHealthyLabel = {{"peregrine.dev/health", "healthy"}, {"kubernetes.io/hostname", "gpu-node-7"}};

TEST_CASE("node health codec: real-looking samples decode", "[unit]") {
  SECTION("a node with none of ours is a healthy machine never seen") {
    absl::StatusOr<NodeHealthRecord> r =
        DecodeNodeHealth("gpu-node-7", {{"kubernetes.io/hostname", "gpu-node-7"}},
                         {{"node.alpha.kubernetes.io/ttl", "0"}, {"peregrine.dev/cordoned-before", "true"}});
    REQUIRE(r.ok());
    NodeHealthRecord want;
    want.node = "gpu-node-7";
    CHECK(*r == want);
  }
  SECTION("suspect") {
    absl::StatusOr<NodeHealthRecord> r = DecodeNodeHealth(
        "gpu-node-7", {{"peregrine.dev/health", "suspect"}},
        {{"peregrine.dev/health-since", "2024-05-01T12:00:00Z"},
         {"peregrine.dev/health-reason", "bad reading against its peers: fail-slow: rank 5 2.9x slower"},
         {"peregrine.dev/health-suspect", "count=2 first=2024-05-01T12:00:00Z last=2024-05-01T12:02:30.25Z"}});
    REQUIRE(r.ok());
    CHECK(r->state == NodeHealth::kSuspect);
    CHECK(r->since == kT0);
    CHECK(r->bad_readings == 2);
    CHECK(r->first_bad_at == kT0);
    CHECK(r->last_bad_at == kT0 + 150 * kSecond + 250'000'000);
    CHECK(absl::StartsWith(r->reason, "bad reading"));
  }
  SECTION("quarantined, a short sweep blocked, with failures") {
    absl::StatusOr<NodeHealthRecord> r = DecodeNodeHealth(
        "gpu-node-7", {{"peregrine.dev/health", "quarantined"}, {"nvidia.com/gpu.count", "8"}},
        {{"peregrine.dev/health-since", "2024-05-01T12:00:00.000000001Z"},
         {"peregrine.dev/health-reason", "over-evicted with its group"},
         {"peregrine.dev/health-sweep", "kind=short attempts=3 due=2024-05-01T12:05:00Z"},
         {"peregrine.dev/health-sweep-blocked", "no image: ErrImagePull"},
         {"peregrine.dev/health-failures", "2024-04-28T09:15:00Z, 2024-04-30T23:59:59.999Z"}});
    REQUIRE(r.ok());
    CHECK(r->state == NodeHealth::kQuarantined);
    CHECK(r->since == kT0 + 1);
    CHECK(r->sweep_kind == SweepKind::kShort);
    CHECK(r->sweep_attempts == 3);
    CHECK(r->sweep_due_at == kT0 + 300 * kSecond);
    CHECK(r->sweep_blocked == "no image: ErrImagePull");
    REQUIRE(r->failures.size() == 2);
    CHECK(r->failures[1] == kT0 - 12 * 3600 * kSecond - 1'000'000);
  }
  SECTION("sweeping, with a time zone offset") {
    absl::StatusOr<NodeHealthRecord> r =
        DecodeNodeHealth("n", {{"peregrine.dev/health", "sweeping"}},
                         {{"peregrine.dev/health-since", "2024-05-01T14:00:00+02:00"},
                          {"peregrine.dev/health-sweep", "kind=full attempts=1 started=2024-05-01T12:00:00Z"}});
    REQUIRE(r.ok());
    CHECK(r->since == kT0);
    CHECK(r->sweep_started_at == kT0);
  }
  SECTION("retired") {
    absl::StatusOr<NodeHealthRecord> r = DecodeNodeHealth(
        "n", {{"peregrine.dev/health", "retired"}},
        {{"peregrine.dev/health-since", "2024-05-01T12:00:00Z"},
         {"peregrine.dev/health-sweep", "kind=full attempts=2"},
         {"peregrine.dev/health-failures", "2024-05-01T10:00:00Z,2024-05-01T11:00:00Z,2024-05-01T12:00:00Z"}});
    REQUIRE(r.ok());
    CHECK(r->state == NodeHealth::kRetired);
    CHECK(r->failures.size() == 3);
    CHECK(DesiredNodeState(*r).retired);
  }
}

TEST_CASE("node health codec: garbage gives an error naming the key", "[unit]") {
  const std::string f16 = [] {
    std::string s;
    for (int i = 0; i < 16; ++i) absl::StrAppend(&s, i ? "," : "", "2024-05-01T12:00:", 10 + i, "Z");
    return s;
  }();
  struct Case {
    const char* name;
    Map labels;
    Map annotations;
    const char* key;       // the key the error must name
    const char* contains;  // and some of what it says
  };
  const std::string since = "2024-05-01T12:00:00Z";
  const Case cases[] = {
      {"unknown state", {{"peregrine.dev/health", "Quarantined"}}, {}, "label peregrine.dev/health", "unknown"},
      {"empty state", {{"peregrine.dev/health", ""}}, {}, "label peregrine.dev/health", "unknown"},
      {"annotations without the label", {}, {{"peregrine.dev/health-since", since}}, "label peregrine.dev/health",
       "missing"},
      {"since missing", {{"peregrine.dev/health", "retired"}}, {}, "peregrine.dev/health-since", "missing"},
      {"since garbage", {{"peregrine.dev/health", "retired"}}, {{"peregrine.dev/health-since", "yesterday"}},
       "peregrine.dev/health-since", "not an RFC 3339 time"},
      {"since Unix seconds", {{"peregrine.dev/health", "retired"}}, {{"peregrine.dev/health-since", "1714564800"}},
       "peregrine.dev/health-since", "not an RFC 3339 time"},
      {"since before 1970", {{"peregrine.dev/health", "retired"}},
       {{"peregrine.dev/health-since", "1969-12-31T23:59:59Z"}}, "peregrine.dev/health-since", "out of range"},
      {"since after 2262", {{"peregrine.dev/health", "retired"}},
       {{"peregrine.dev/health-since", "2300-01-01T00:00:00Z"}}, "peregrine.dev/health-since", "out of range"},
      {"reason too long", {{"peregrine.dev/health", "healthy"}},
       {{"peregrine.dev/health-reason", std::string(600, 'x')}}, "peregrine.dev/health-reason", "at most 512"},
      {"suspect without its annotation", {{"peregrine.dev/health", "suspect"}},
       {{"peregrine.dev/health-since", since}}, "peregrine.dev/health-suspect", "missing"},
      {"suspect count not a number", {{"peregrine.dev/health", "suspect"}},
       {{"peregrine.dev/health-since", since},
        {"peregrine.dev/health-suspect", "count=two first=" + since + " last=" + since}},
       "peregrine.dev/health-suspect", "field count"},
      {"suspect count zero", {{"peregrine.dev/health", "suspect"}},
       {{"peregrine.dev/health-since", since},
        {"peregrine.dev/health-suspect", "count=0 first=" + since + " last=" + since}},
       "peregrine.dev/health-suspect", "field count"},
      {"suspect count overflows", {{"peregrine.dev/health", "suspect"}},
       {{"peregrine.dev/health-since", since},
        {"peregrine.dev/health-suspect", "count=99999999999999999999 first=" + since + " last=" + since}},
       "peregrine.dev/health-suspect", "field count"},
      {"suspect field missing", {{"peregrine.dev/health", "suspect"}},
       {{"peregrine.dev/health-since", since}, {"peregrine.dev/health-suspect", "count=2 first=" + since}},
       "peregrine.dev/health-suspect", "field last missing"},
      {"suspect last before first", {{"peregrine.dev/health", "suspect"}},
       {{"peregrine.dev/health-since", since},
        {"peregrine.dev/health-suspect", "count=2 first=" + since + " last=2024-05-01T11:00:00Z"}},
       "peregrine.dev/health-suspect", "before"},
      {"suspect not key=value", {{"peregrine.dev/health", "suspect"}},
       {{"peregrine.dev/health-since", since}, {"peregrine.dev/health-suspect", "3 readings"}},
       "peregrine.dev/health-suspect", "not key=value"},
      {"suspect field twice", {{"peregrine.dev/health", "suspect"}},
       {{"peregrine.dev/health-since", since}, {"peregrine.dev/health-suspect", "count=1 count=2"}},
       "peregrine.dev/health-suspect", "twice"},
      {"suspect annotation outside suspect", {{"peregrine.dev/health", "healthy"}},
       {{"peregrine.dev/health-suspect", "count=1 first=" + since + " last=" + since}},
       "peregrine.dev/health-suspect", "outside"},
      {"sweep unknown field", {{"peregrine.dev/health", "quarantined"}},
       {{"peregrine.dev/health-since", since}, {"peregrine.dev/health-sweep", "kind=full due=" + since + " x=1"}},
       "peregrine.dev/health-sweep", "unknown field"},
      {"sweep unknown kind", {{"peregrine.dev/health", "quarantined"}},
       {{"peregrine.dev/health-since", since}, {"peregrine.dev/health-sweep", "kind=long due=" + since}},
       "peregrine.dev/health-sweep", "field kind"},
      {"sweep negative attempts", {{"peregrine.dev/health", "quarantined"}},
       {{"peregrine.dev/health-since", since}, {"peregrine.dev/health-sweep", "attempts=-1 due=" + since}},
       "peregrine.dev/health-sweep", "field attempts"},
      {"sweep due garbage", {{"peregrine.dev/health", "quarantined"}},
       {{"peregrine.dev/health-since", since}, {"peregrine.dev/health-sweep", "due=soon"}},
       "peregrine.dev/health-sweep", "field due"},
      {"quarantined without due", {{"peregrine.dev/health", "quarantined"}},
       {{"peregrine.dev/health-since", since}}, "peregrine.dev/health-sweep", "due missing"},
      {"sweeping without start", {{"peregrine.dev/health", "sweeping"}},
       {{"peregrine.dev/health-since", since}, {"peregrine.dev/health-sweep", "kind=full attempts=1"}},
       "peregrine.dev/health-sweep", "started"},
      {"short kind on a healthy node", {{"peregrine.dev/health", "healthy"}},
       {{"peregrine.dev/health-sweep", "kind=short attempts=1"}}, "peregrine.dev/health-sweep", "kind short"},
      {"blocked outside quarantined", {{"peregrine.dev/health", "healthy"}},
       {{"peregrine.dev/health-sweep-blocked", "no image"}}, "peregrine.dev/health-sweep-blocked", "set"},
      {"failures garbage", {{"peregrine.dev/health", "healthy"}},
       {{"peregrine.dev/health-failures", "2024-05-01T12:00:00Z,\xff\xfe"}}, "peregrine.dev/health-failures",
       "not an RFC 3339 time"},
      {"failures out of order", {{"peregrine.dev/health", "healthy"}},
       {{"peregrine.dev/health-failures", "2024-05-02T00:00:00Z,2024-05-01T00:00:00Z"}},
       "peregrine.dev/health-failures", "oldest first"},
      {"too many failures", {{"peregrine.dev/health", "healthy"}},
       {{"peregrine.dev/health-failures", f16 + ",2024-05-01T12:01:00Z"}}, "peregrine.dev/health-failures",
       "17 times, at most 16"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    absl::StatusOr<NodeHealthRecord> r = DecodeNodeHealth("n", c.labels, c.annotations);
    REQUIRE_FALSE(r.ok());
    INFO(r.status());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains(c.key));
    CHECK_THAT(std::string(r.status().message()), Catch::Contains(c.contains));
  }
  // Sixteen failures are fine.
  CHECK(DecodeNodeHealth("n", kHealthyLabel, {{"peregrine.dev/health-failures", f16}}).ok());
}

// Random bytes and mutations of a valid encoding never crash the decoder; each failure is
// an InvalidArgument naming one of our keys.
TEST_CASE("node health codec: fuzzed values never crash and errors name a key", "[unit]") {
  NodeHealthRecord base;
  base.node = "n";
  base.state = NodeHealth::kQuarantined;
  base.since = kT0;
  base.reason = "evicted as the culprit";
  base.sweep_attempts = 2;
  base.sweep_due_at = kT0 + 60 * kSecond;
  base.failures = {kT0 - 100 * kSecond, kT0};
  const NodeHealthMetadata valid = EncodeNodeHealth(base);
  std::mt19937_64 rng(7);
  const std::string alphabet = "0123456789:-TZ.=, +kindfulshortattemptsduestarted\xff\x00";
  for (int i = 0; i < 5000; ++i) {
    NodeHealthMetadata m = valid;
    std::vector<std::string*> values;
    for (auto& [k, v] : m.annotations) values.push_back(&v);
    for (auto& [k, v] : m.labels) values.push_back(&v);
    std::string& v = *values[rng() % values.size()];
    switch (rng() % 3) {
      case 0:  // replace a byte
        if (!v.empty()) v[rng() % v.size()] = alphabet[rng() % alphabet.size()];
        break;
      case 1:  // truncate
        v.resize(v.empty() ? 0 : rng() % v.size());
        break;
      default:  // random text
        v.clear();
        for (size_t n = rng() % 40; n > 0; --n) v.push_back(alphabet[rng() % alphabet.size()]);
    }
    absl::StatusOr<NodeHealthRecord> r = DecodeNodeHealth("n", m.labels, m.annotations);
    if (r.ok()) continue;
    INFO(r.status());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("peregrine.dev/health"));
  }
}

NodeHealthRecord RandomRecord(std::mt19937_64& rng) {
  // Up to 2262, leaving room for the suspect's span.
  constexpr uint64_t kLatest = static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - 10'000 * kSecond;
  auto time = [&] { return static_cast<int64_t>(1 + rng() % kLatest); };
  auto text = [&](size_t max) {
    std::string s;
    for (size_t n = rng() % max; n > 0; --n) s.push_back(static_cast<char>(' ' + rng() % 95));
    return s;
  };
  NodeHealthRecord r;
  r.node = "node-" + std::to_string(rng() % 1000);
  r.state = static_cast<NodeHealth>(rng() % kNodeHealthStates);
  if (r.state != NodeHealth::kHealthy || rng() % 2) r.since = time();
  r.reason = text(kMaxNodeHealthReason);
  r.sweep_attempts = static_cast<int>(rng() % 5);
  switch (r.state) {
    case NodeHealth::kSuspect:
      r.bad_readings = static_cast<int>(1 + rng() % 1000);
      r.first_bad_at = time();
      r.last_bad_at = r.first_bad_at + static_cast<int64_t>(rng() % 1000) * kSecond;
      break;
    case NodeHealth::kQuarantined:
      r.sweep_kind = rng() % 2 ? SweepKind::kShort : SweepKind::kFull;
      r.sweep_due_at = time();
      if (rng() % 2) r.sweep_blocked = text(100);
      break;
    case NodeHealth::kSweeping:
      r.sweep_kind = rng() % 2 ? SweepKind::kShort : SweepKind::kFull;
      r.sweep_attempts = static_cast<int>(1 + rng() % 1000);
      r.sweep_started_at = time();
      break;
    default:
      break;
  }
  for (size_t n = rng() % (kMaxFailureHistory + 1); n > 0; --n) r.failures.push_back(time());
  std::sort(r.failures.begin(), r.failures.end());
  return r;
}

TEST_CASE("node health codec: random records survive the round trip", "[unit]") {
  std::mt19937_64 rng(20240501);
  for (int i = 0; i < 3000; ++i) {
    const NodeHealthRecord r = RandomRecord(rng);
    const NodeHealthMetadata m = EncodeNodeHealth(r);
    for (const auto& [key, value] : m.annotations) {
      CHECK(absl::StartsWith(key, "peregrine.dev/health-"));
      CHECK(value.size() <= 1024);
    }
    absl::StatusOr<NodeHealthRecord> back = DecodeNodeHealth(r.node, m.labels, m.annotations);
    INFO("record " << i << " state " << NodeHealthName(r.state));
    REQUIRE(back.ok());
    CHECK(*back == r);
  }
}

TEST_CASE("node health codec: the encoding is compact and readable", "[unit]") {
  NodeHealthRecord r;
  r.node = "gpu-node-7";
  r.state = NodeHealth::kSweeping;
  r.since = kT0 + 500'000'000;
  r.reason = "sweep 2 (full) started at 2024-05-01T12:00:00Z";
  r.sweep_attempts = 2;
  r.sweep_started_at = kT0 + 500'000'000;
  r.failures = {kT0 - 3600 * kSecond, kT0 - 60 * kSecond};
  const NodeHealthMetadata m = EncodeNodeHealth(r);
  CHECK(m.labels == Map{{"peregrine.dev/health", "sweeping"}});
  CHECK(m.annotations == Map{{"peregrine.dev/health-since", "2024-05-01T12:00:00.5Z"},
                             {"peregrine.dev/health-reason", "sweep 2 (full) started at 2024-05-01T12:00:00Z"},
                             {"peregrine.dev/health-sweep", "kind=full attempts=2 started=2024-05-01T12:00:00.5Z"},
                             {"peregrine.dev/health-failures", "2024-05-01T11:00:00Z,2024-05-01T11:59:00Z"}});
  for (const auto& [key, value] : m.annotations) {
    CHECK(std::find(kNodeHealthAnnotationKeys.begin(), kNodeHealthAnnotationKeys.end(), key) !=
          kNodeHealthAnnotationKeys.end());
  }
  // A healthy machine never seen: the label alone.
  NodeHealthRecord fresh;
  CHECK(EncodeNodeHealth(fresh).annotations.empty());
  CHECK(EncodeNodeHealth(fresh).labels == Map{{"peregrine.dev/health", "healthy"}});
  // Oversized parts are bounded: the reason cut at a UTF-8 boundary, the oldest failures dropped.
  NodeHealthRecord big;
  big.reason = std::string(kMaxNodeHealthReason - 4, 'x') + "\xc3\xa9\xc3\xa9tail";  // é é across the cut
  for (int i = 0; i < 20; ++i) big.failures.push_back(kT0 + i * kSecond);
  const NodeHealthMetadata b = EncodeNodeHealth(big);
  const std::string& reason = b.annotations.at("peregrine.dev/health-reason");
  CHECK(reason.size() <= kMaxNodeHealthReason);
  CHECK(absl::EndsWith(reason, "x..."));
  absl::StatusOr<NodeHealthRecord> back = DecodeNodeHealth("n", b.labels, b.annotations);
  REQUIRE(back.ok());
  REQUIRE(back->failures.size() == kMaxFailureHistory);
  CHECK(back->failures.front() == kT0 + 4 * kSecond);
}

TEST_CASE("node health codec: records the state machine produces survive the round trip", "[unit]") {
  std::mt19937_64 rng(99);
  const NodeLifecycleOptions options;
  const NodeInputKind kinds[] = {NodeInputKind::kBadReading,   NodeInputKind::kBadReading,
                                 NodeInputKind::kFaultEviction, NodeInputKind::kOverEviction,
                                 NodeInputKind::kSweepStarted, NodeInputKind::kSweepPassed,
                                 NodeInputKind::kSweepFailed,  NodeInputKind::kSweepNotStarted,
                                 NodeInputKind::kTick,         NodeInputKind::kOperatorReturn};
  NodeHealthRecord record;
  record.node = "gpu-node-7";
  int64_t now = kT0;
  for (int step = 0; step < 3000; ++step) {
    now += static_cast<int64_t>(rng() % 1800) * kSecond + static_cast<int64_t>(rng() % kSecond);
    NodeInput in;
    in.kind = kinds[rng() % std::size(kinds)];
    in.at = now;
    in.detail = "reading " + std::to_string(step);
    in.sweep_attempt = record.sweep_attempts + (in.kind == NodeInputKind::kSweepStarted ||
                                                        in.kind == NodeInputKind::kSweepNotStarted
                                                    ? 1
                                                    : 0);
    if (in.sweep_attempt < 1) in.sweep_attempt = 1;
    absl::StatusOr<NodeLifecycleResult> r = NodeLifecycleStep(record, in, now, options);
    REQUIRE(r.ok());
    record = r->record;
    const NodeHealthMetadata m = EncodeNodeHealth(record);
    absl::StatusOr<NodeHealthRecord> back = DecodeNodeHealth(record.node, m.labels, m.annotations);
    INFO("step " << step);
    REQUIRE(back.ok());
    CHECK(*back == record);
  }
}

}  // namespace
}  // namespace peregrine
