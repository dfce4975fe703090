// The Kubernetes mode's HTTP limit flags reach KubeModeOptions::http_limits.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "controller/kube/kube_command.h"

namespace peregrine {
namespace {

absl::StatusOr<KubeMainOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), {"--agent-image", "agent:1", "--controller-address", "c:7400"});
  return ParseKubeMainFlags(args, [](std::string_view) { return std::optional<std::string>(); });
}

TEST_CASE("The flags http-max-connections and http-max-queued-connections set the HTTP servers limits", "[unit]") {
  absl::StatusOr<KubeMainOptions> defaults = Parse({});
  REQUIRE(defaults.ok());
  CHECK(defaults->mode.http_limits.max_connections == 32);
  CHECK(defaults->mode.http_limits.max_queued_connections == 1024);
  CHECK(defaults->mode.http_limits.max_body_bytes == 1u << 20);
  absl::StatusOr<KubeMainOptions> set = Parse({"--http-max-connections", "8", "--http-max-queued-connections", "64"});
  REQUIRE(set.ok());
  CHECK(set->mode.http_limits.max_connections == 8);
  CHECK(set->mode.http_limits.max_queued_connections == 64);
  absl::StatusOr<KubeMainOptions> zero = Parse({"--http-max-connections", "0"});
  REQUIRE_FALSE(zero.ok());
  CHECK(absl::StrContains(zero.status().message(), "--http-max-connections"));
}

}  // namespace
}  // namespace peregrine
