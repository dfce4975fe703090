// ParseFaultRequest / FaultRequestToJson: the fault-injection body of the HTTP API.
#include "proto/api/fault_request.h"

#include <string>

#include <catch2/catch.hpp>

namespace peregrine {
namespace {

TEST_CASE("ParseFaultRequest reads every field and FaultRequestToJson reads back", "[unit]") {
  auto link = ParseFaultRequest(
      R"({"kind":"link","slot":1,"localRank":0,"peerSlot":2,"delayUs":500,"bandwidthBytesPerSecond":1e9})");
  REQUIRE(link.ok());
  CHECK(link->kind == "link");
  CHECK(link->slot == 1);
  CHECK(link->local_rank == 0);
  CHECK(link->peer_slot == 2);
  CHECK(link->delay_us == 500);
  CHECK(link->bandwidth_bytes_per_second == 1e9);
  auto back = ParseFaultRequest(FaultRequestToJson(*link));
  REQUIRE(back.ok());
  CHECK(FaultRequestToJson(*back) == FaultRequestToJson(*link));
  auto xid = ParseFaultRequest(R"({"kind":"xid","machine":"demo-m1"})");
  REQUIRE(xid.ok());
  CHECK(xid->xid == 79);
  CHECK(xid->slot == -1);
  // A whole number written as a double is still that integer.
  auto whole = ParseFaultRequest(R"({"kind":"kill","slot":2.0})");
  REQUIRE(whole.ok());
  CHECK(whole->slot == 2);
}

TEST_CASE("ParseFaultRequest names an integer field that is out of range or not whole (fuzz finding)", "[unit]") {
  struct Case {
    std::string body, field;
  };
  for (const Case& c : {Case{R"({"kind":"kill","slot":5.77778e+66})", "slot"},
                        Case{R"({"kind":"kill","slot":4294967297})", "slot"},
                        Case{R"({"kind":"kill","slot":1.5})", "slot"},
                        Case{R"({"kind":"kill","slot":1,"localRank":-1e300})", "localRank"},
                        Case{R"({"kind":"link","slot":1,"peerSlot":"2","delayUs":1})", "peerSlot"},
                        Case{R"({"kind":"link","slot":1,"delayUs":1e19})", "delayUs"},
                        Case{R"({"kind":"link","slot":1,"delayUs":18446744073709551615})", "delayUs"},
                        Case{R"({"kind":"xid","slot":1,"xid":2147483648})", "xid"}}) {
    INFO(c.body);
    auto r = ParseFaultRequest(c.body);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(r.status().message().rfind(c.field + ": expected an integer", 0) == 0);
  }
}

}  // namespace
}  // namespace peregrine
