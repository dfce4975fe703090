// peregrine_node_health_machines{state}: one series per node health state, set from the
// node health passes' counts (CountNodeHealth's order).
#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "controller/controller_metrics.h"
#include "controller/core/node_lifecycle.h"

namespace peregrine {
namespace {

TEST_CASE("node health gauge: every state has a series, zero until counted, then the pass's counts", "[unit]") {
  ControllerMetrics m;
  for (const char* state : {"healthy", "suspect", "quarantined", "sweeping", "retired"}) {
    CHECK(absl::StrContains(m.Serialize(), std::string("peregrine_node_health_machines{state=\"") + state + "\"} 0"));
  }
  NodeHealthRecord quarantined;
  quarantined.state = NodeHealth::kQuarantined;
  NodeHealthRecord retired;
  retired.state = NodeHealth::kRetired;
  m.SetNodeHealthCounts(CountNodeHealth({NodeHealthRecord{}, NodeHealthRecord{}, quarantined, retired}));
  const std::string text = m.Serialize();
  CHECK(absl::StrContains(text, "peregrine_node_health_machines{state=\"healthy\"} 2"));
  CHECK(absl::StrContains(text, "peregrine_node_health_machines{state=\"quarantined\"} 1"));
  CHECK(absl::StrContains(text, "peregrine_node_health_machines{state=\"retired\"} 1"));
  CHECK(absl::StrContains(text, "peregrine_node_health_machines{state=\"sweeping\"} 0"));
  CHECK(absl::StrContains(text, "# HELP peregrine_node_health_machines Machines (Nodes) in each node health state"));
  // The next pass replaces the counts.
  m.SetNodeHealthCounts(CountNodeHealth({}));
  CHECK(absl::StrContains(m.Serialize(), "peregrine_node_health_machines{state=\"retired\"} 0"));
}

}  // namespace
}  // namespace peregrine
