// MakeHangPolicyInput (controller/core/hang_policy.h) keeps only the replies DecideHang can
// read: the newest investigation's while it is open, and those of ids from next_id.
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "controller/core/hang_policy.h"
#include "tests/testing/layout.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kT0 = 1'700'000'000 * kSecond;

std::set<std::string> ReplyIds(const HangPolicyInput& in) {
  std::set<std::string> ids;
  for (const auto& [id, reply] : in.replies) ids.insert(id);
  return ids;
}

TEST_CASE("MakeHangPolicyInput leaves out the replies of investigations DecideHang no longer reads", "[unit]") {
  TrainingJob job;
  job.metadata.name = "demo";
  job.spec.machines = 2;
  job.spec.gpus_per_machine = 2;
  job.spec.parallelism = {2, 1, 2};
  JobStatus st;
  st.attempt = 3;
  st.slots = {SlotStatus{0, "demo-m0", "a", true}, SlotStatus{1, "demo-m1", "b", true}};
  st.stack_diagnosis.next_id = 3;
  st.stack_diagnosis.progress_attempt = 3;
  st.stack_diagnosis.progress_at = kT0;
  for (uint64_t id : {1, 2}) {
    StackInvestigation inv;
    inv.id = id;
    inv.attempt = 3;
    inv.state = InvestigationState::kResolved;
    inv.started_at = kT0;
    inv.rounds.push_back(StackRound{});
    inv.rounds.back().started_at = kT0;
    st.stack_diagnosis.investigations.push_back(inv);
  }
  JobObservation obs;
  for (const char* pod : {"demo-m0", "demo-m1"}) {
    obs.pods.push_back(PodObservation{pod, "", true, false, "", "", 0, false, false, {}, ""});
    AgentObservation a;
    a.pod = pod;
    a.connected = true;
    a.attempt = 3;
    a.phase = AgentTrainingPhase::kRunning;
    a.last_seen = kT0;
    for (const char* round : {"1-1", "2-1", "2-2", "3-1", "10-1", "x-1"}) {
      CommandResultObservation r;
      r.ok = true;
      a.command_results[absl::StrCat("default/demo/", pod, "/stacks-", round)] = r;
    }
    a.command_results[absl::StrCat("default/demo/", pod, "/attempt-3")] = CommandResultObservation{};
    obs.agents.push_back(a);
  }
  const ParallelLayout layout = testing::Layout(2, 1, 2, 2);
  auto ids = [](std::vector<std::string> rounds) {
    std::set<std::string> out;
    for (const char* pod : {"demo-m0", "demo-m1"}) {
      for (const std::string& r : rounds) out.insert(absl::StrCat("default/demo/", pod, "/stacks-", r));
    }
    return out;
  };
  SECTION("the newest investigation is open: its replies and later ones") {
    st.stack_diagnosis.investigations.back().state = InvestigationState::kCapturing;
    const HangPolicyInput in = MakeHangPolicyInput(job, st, obs, &layout, false, false);
    CHECK(ReplyIds(in) == ids({"2-1", "2-2", "3-1", "10-1", "x-1"}));
    // The replies left out change nothing DecideHang decides.
    HangPolicyInput full = in;
    full.replies[absl::StrCat("default/demo/demo-m0/stacks-1-1")] = StackCaptureReply{};
    full.replies[absl::StrCat("default/demo/demo-m1/stacks-1-1")] = StackCaptureReply{};
    for (int64_t now : {kT0 + kSecond, kT0 + 600 * kSecond}) {
      const HangDecision a = DecideHang(in, now);
      const HangDecision b = DecideHang(full, now);
      CHECK(a.verdict == b.verdict);
      CHECK(a.captures.size() == b.captures.size());
      CHECK(a.state.investigations.back().state == b.state.investigations.back().state);
      CHECK(a.state.investigations.back().rounds.back().unanswered_slots ==
            b.state.investigations.back().rounds.back().unanswered_slots);
    }
  }
  SECTION("every investigation is closed: replies from next_id only") {
    const HangPolicyInput in = MakeHangPolicyInput(job, st, obs, &layout, false, false);
    CHECK(ReplyIds(in) == ids({"3-1", "10-1", "x-1"}));
  }
}

}  // namespace
}  // namespace peregrine
