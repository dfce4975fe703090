// AnyStuckStandby (controller/core/pod_health.h) against FailStuckStandbys: DecideJob
// copies the observation only when the predicate says a standby is to be marked failed.
#include "controller/core/pod_health.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kNow = 1'700'000'000 * kSecond;
constexpr int64_t kTimeout = 600 * kSecond;

PodObservation Waiting(const std::string& name, int64_t age, const std::string& why = "ImagePullBackOff") {
  PodObservation p;
  p.name = name;
  p.machine_id = "node-1";
  p.waiting_reason = why;
  p.created_at = kNow - age;
  return p;
}

TEST_CASE("AnyStuckStandby is true exactly when FailStuckStandbys marks a pod failed", "[unit]") {
  JobStatus status;
  status.standbys.push_back(StandbyStatus{});
  status.standbys.back().pod = "job-s1";
  PodObservation running = Waiting("job-s1", 2 * kTimeout);
  running.running = true;
  PodObservation failed = Waiting("job-s1", 2 * kTimeout);
  failed.failed = true;
  PodObservation unknown_age = Waiting("job-s1", 0);
  unknown_age.created_at = 0;
  struct Case {
    const char* name;
    std::vector<PodObservation> pods;
    bool stuck;
  };
  const std::vector<Case> cases = {
      {"no pods", {}, false},
      {"a standby past the timeout", {Waiting("job-s1", kTimeout)}, true},
      {"a standby within the timeout", {Waiting("job-s1", kTimeout - 1)}, false},
      {"an active pod past the timeout", {Waiting("job-m0", 2 * kTimeout)}, false},
      {"a standby not waiting", {Waiting("job-s1", 2 * kTimeout, "")}, false},
      {"a running standby", {running}, false},
      {"a failed standby", {failed}, false},
      {"a standby of unknown age", {unknown_age}, false},
      {"one of several", {Waiting("job-m0", 2 * kTimeout), running, Waiting("job-s1", 3 * kTimeout)}, true},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    CHECK(AnyStuckStandby(status, kNow, kTimeout, c.pods) == c.stuck);
    std::vector<PodObservation> marked = c.pods;
    FailStuckStandbys(status, kNow, kTimeout, marked);
    bool changed = false;
    for (size_t i = 0; i < marked.size(); ++i) {
      changed = changed || marked[i].failed != c.pods[i].failed || marked[i].reason != c.pods[i].reason;
    }
    CHECK(changed == c.stuck);
  }
}

}  // namespace
}  // namespace peregrine
