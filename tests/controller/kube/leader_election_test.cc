// The leader-election decision as a table, the Lease JSON translation and config checks.
#include "controller/kube/leader_election.h"

#include <catch2/catch.hpp>

namespace peregrine::kube {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1700000000);
const absl::Duration kLease = absl::Seconds(15);

LeaseRecord Held(std::string holder, absl::Time renew, int transitions = 3, int seconds = 15) {
  LeaseRecord r;
  r.holder_identity = std::move(holder);
  r.lease_duration_seconds = seconds;
  r.acquire_time = renew - absl::Minutes(5);
  r.renew_time = renew;
  r.lease_transitions = transitions;
  return r;
}

struct Case {
  const char* name;
  std::optional<LeaseRecord> current;
  LeaseObservation last;
  LeaseAction want;
};

TEST_CASE("leader election: acquire/renew decision table", "[unit]") {
  const LeaseRecord other = Held("other", kNow - absl::Seconds(1));
  // The other holder's clock runs an hour ahead: its renewTime is irrelevant to us.
  const LeaseRecord skewed = Held("other", kNow + absl::Hours(1));
  const LeaseRecord ancient = Held("other", kNow - absl::Hours(1));
  LeaseRecord released = Held("", kNow - absl::Seconds(1), 3, 1);
  const Case cases[] = {
      {"no lease: create", std::nullopt, {}, LeaseAction::kCreate},
      {"held by other, first seen now: wait", other, {}, LeaseAction::kWait},
      {"held by other, unchanged for 14.9s of our time: wait", other,
       {other, kNow - absl::Milliseconds(14900)}, LeaseAction::kWait},
      {"held by other, unchanged for 15s of our time: take over", other,
       {other, kNow - kLease}, LeaseAction::kTakeOver},
      {"renewTime long past by the holder's clock but first seen now: wait", ancient, {},
       LeaseAction::kWait},
      {"holder renewed since we last looked: wait (observation restarts)", other,
       {ancient, kNow - absl::Hours(1)}, LeaseAction::kWait},
      {"holder clock ahead, record unchanged 15s on our clock: take over", skewed,
       {skewed, kNow - absl::Seconds(16)}, LeaseAction::kTakeOver},
      {"released (empty holder): take over at once", released, {}, LeaseAction::kTakeOver},
      {"held by us: renew", Held("me", kNow - absl::Seconds(20)), {}, LeaseAction::kRenew},
      {"record's own duration (60s) counts, not ours", Held("other", kNow, 3, 60),
       {Held("other", kNow, 3, 60), kNow - absl::Seconds(30)}, LeaseAction::kWait},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const LeaseDecision d = DecideLease(c.current, c.last, kNow, "me", kLease);
    CHECK(d.action == c.want);
  }
}

TEST_CASE("leader election: records written by each action", "[unit]") {
  SECTION("create") {
    const LeaseDecision d = DecideLease(std::nullopt, {}, kNow, "me", kLease);
    CHECK(d.desired.holder_identity == "me");
    CHECK(d.desired.lease_duration_seconds == 15);
    CHECK(d.desired.acquire_time == kNow);
    CHECK(d.desired.renew_time == kNow);
    CHECK(d.desired.lease_transitions == 0);
    CHECK(d.observation.observed_time == kNow);
  }
  SECTION("take over bumps transitions and acquireTime") {
    const LeaseRecord other = Held("other", kNow - absl::Seconds(30), 7);
    const LeaseDecision d = DecideLease(other, {other, kNow - absl::Seconds(15)}, kNow, "me", kLease);
    REQUIRE(d.action == LeaseAction::kTakeOver);
    CHECK(d.desired.holder_identity == "me");
    CHECK(d.desired.lease_transitions == 8);
    CHECK(d.desired.acquire_time == kNow);
    CHECK(d.desired.renew_time == kNow);
  }
  SECTION("renew keeps acquireTime and transitions") {
    const LeaseRecord mine = Held("me", kNow - absl::Seconds(2), 4);
    const LeaseDecision d = DecideLease(mine, {mine, kNow - absl::Seconds(2)}, kNow, "me", kLease);
    REQUIRE(d.action == LeaseAction::kRenew);
    CHECK(d.desired.acquire_time == mine.acquire_time);
    CHECK(d.desired.lease_transitions == 4);
    CHECK(d.desired.renew_time == kNow);
  }
  SECTION("wait reports when the holder expires on our clock and keeps the first sighting") {
    const LeaseRecord other = Held("other", kNow);
    const LeaseDecision first = DecideLease(other, {}, kNow, "me", kLease);
    REQUIRE(first.action == LeaseAction::kWait);
    CHECK(first.holder_valid_until == kNow + kLease);
    const LeaseDecision later =
        DecideLease(other, first.observation, kNow + absl::Seconds(5), "me", kLease);
    CHECK(later.observation.observed_time == kNow);
    CHECK(later.holder_valid_until == kNow + kLease);
  }
}

TEST_CASE("leader election: a candidate polling an unrenewed lease takes it after exactly the lease duration of its own time", "[unit]") {
  const LeaseRecord other = Held("other", kNow - absl::Hours(3));
  LeaseObservation obs;
  absl::Time t = kNow;
  int waits = 0;
  while (true) {
    const LeaseDecision d = DecideLease(other, obs, t, "me", kLease);
    obs = d.observation;
    if (d.action != LeaseAction::kWait) {
      CHECK(d.action == LeaseAction::kTakeOver);
      break;
    }
    ++waits;
    t += absl::Seconds(2);
  }
  CHECK(t - kNow == absl::Seconds(16));  // first poll at >= 15s after the first sighting
  CHECK(waits == 8);
}

TEST_CASE("leader election: MicroTime and Lease JSON round trip", "[unit]") {
  const absl::Time t = absl::FromUnixMicros(1700000000123456);
  CHECK(FormatMicroTime(t) == "2023-11-14T22:13:20.123456Z");
  auto parsed = ParseMicroTime("2023-11-14T22:13:20.123456Z");
  REQUIRE(parsed.ok());
  CHECK(*parsed == t);
  auto offset = ParseMicroTime("2023-11-14T23:13:20.123456+01:00");
  REQUIRE(offset.ok());
  CHECK(*offset == t);

  LeaseRecord r = Held("pod-a_1234", t, 5);
  nlohmann::json lease = {{"metadata", {{"name", "peregrine"}}}, {"spec", LeaseSpecToJson(r)}};
  CHECK(lease["spec"]["renewTime"] == "2023-11-14T22:13:20.123456Z");
  auto back = LeaseRecordFromJson(lease);
  REQUIRE(back.ok());
  CHECK(*back == r);

  auto empty = LeaseRecordFromJson(nlohmann::json{{"metadata", {{"name", "x"}}}});
  REQUIRE(empty.ok());
  CHECK(empty->holder_identity.empty());
}

TEST_CASE("leader election: garbled Lease records are errors naming the field", "[unit]") {
  auto bad_holder = LeaseRecordFromJson(nlohmann::json{{"spec", {{"holderIdentity", 7}}}});
  REQUIRE_FALSE(bad_holder.ok());
  CHECK_THAT(std::string(bad_holder.status().message()), Catch::Contains("holderIdentity"));
  auto bad_time = LeaseRecordFromJson(nlohmann::json{{"spec", {{"renewTime", "yesterday"}}}});
  REQUIRE_FALSE(bad_time.ok());
  CHECK_THAT(std::string(bad_time.status().message()), Catch::Contains("renewTime"));
  auto bad_duration =
      LeaseRecordFromJson(nlohmann::json{{"spec", {{"leaseDurationSeconds", "15"}}}});
  REQUIRE_FALSE(bad_duration.ok());
  CHECK_THAT(std::string(bad_duration.status().message()), Catch::Contains("leaseDurationSeconds"));
  CHECK_FALSE(LeaseRecordFromJson(nlohmann::json::array()).ok());
}

TEST_CASE("leader election: configuration must order the durations like client-go", "[unit]") {
  LeaderElectionConfig c{.lease_namespace = "ns", .lease_name = "l", .identity = "me"};
  CHECK(ValidateLeaderElectionConfig(c).ok());  // 15s / 10s / 2s
  LeaderElectionConfig renew_too_long = c;
  renew_too_long.renew_deadline = absl::Seconds(15);
  CHECK(ValidateLeaderElectionConfig(renew_too_long).code() == absl::StatusCode::kInvalidArgument);
  LeaderElectionConfig retry_too_long = c;
  retry_too_long.retry_period = absl::Seconds(9);
  CHECK_FALSE(ValidateLeaderElectionConfig(retry_too_long).ok());
  LeaderElectionConfig anonymous = c;
  anonymous.identity.clear();
  CHECK_FALSE(ValidateLeaderElectionConfig(anonymous).ok());
}

}  // namespace
}  // namespace peregrine::kube
