#include "controller/recovery_policy.h"

#include <catch2/catch.hpp>

namespace peregrine {
namespace {

TEST_CASE("UserCodeError recognises Python tracebacks ending in user-code errors", "[unit]") {
  struct Case {
    std::vector<std::string> lines;
    std::optional<std::string> want;
  };
  const Case cases[] = {
      {{"Traceback (most recent call last):", "  File \"train.py\", line 10, in <module>", "    x = batch[5]",
        "IndexError: list index out of range"},
       "IndexError: list index out of range"},
      {{"step 3 loss 1.2", "Traceback (most recent call last):", "  File \"m.py\", line 1, in <module>",
        "ModuleNotFoundError: No module named 'flash_attn'"},
       "ModuleNotFoundError: No module named 'flash_attn'"},
      {{"Traceback (most recent call last):", "  File \"m.py\", line 2", "builtins.KeyError: 'lr'"},
       "builtins.KeyError: 'lr'"},
      {{"Traceback (most recent call last):", "  File \"m.py\", line 2", "NameError"}, "NameError"},
      // Not user code: runtime/NCCL errors, native crashes, no traceback at all.
      {{"Traceback (most recent call last):", "  File \"m.py\", line 2",
        "RuntimeError: NCCL communicator was aborted"},
       std::nullopt},
      {{"TypeError: mentioned without a traceback"}, std::nullopt},
      {{"Segmentation fault (core dumped)"}, std::nullopt},
      {{}, std::nullopt},
      // Garbage.
      {{"Traceback (most recent call last):", "\x01\x02 :::", "TypeError is mentioned here: no"}, std::nullopt},
  };
  for (const Case& c : cases) CHECK(UserCodeError(c.lines) == c.want);
}

CodeVersionSpec Code(const std::string& rev) { return CodeVersionSpec{"", {"train", rev}, rev, {}}; }

TEST_CASE("RollbackTarget picks the last healthy earlier version", "[unit]") {
  using H = std::vector<VersionRecord>;
  const H none = {};
  const H only = {{Code("v1"), 1, "initial", "Healthy", 0}};
  const H two = {{Code("v1"), 1, "initial", "Healthy", 0}, {Code("v2"), 2, "update", "Running", 10}};
  const H skip_unhealthy = {{Code("v1"), 1, "initial", "Healthy", 0},
                            {Code("v2"), 2, "update", "Running", 10},
                            {Code("v3"), 3, "update", "Running", 11}};
  const H after_rollback = {{Code("v1"), 1, "initial", "Healthy", 0},
                            {Code("v2"), 2, "update", "RolledBack", 10},
                            {Code("v1"), 3, "rollback", "Running", 10}};
  const H never_healthy = {{Code("v1"), 1, "initial", "Running", 0}, {Code("v2"), 2, "update", "Running", 0}};
  CHECK_FALSE(RollbackTarget(none).has_value());
  CHECK_FALSE(RollbackTarget(only).has_value());
  CHECK(RollbackTarget(two) == Code("v1"));
  CHECK(RollbackTarget(skip_unhealthy) == Code("v1"));
  CHECK_FALSE(RollbackTarget(after_rollback).has_value());
  CHECK(RollbackTarget(never_healthy) == Code("v1"));
  CHECK(WasRejected(after_rollback, Code("v2")));
  CHECK_FALSE(WasRejected(after_rollback, Code("v1")));
}

TEST_CASE("Network alarms are recorded once and counted per machine within the window", "[unit]") {
  AgentObservation a;
  InspectionObservation flap{"network", "sim0", "WARNING", "1 link flaps", false, 100};
  InspectionObservation gpu{"gpu", "gpu0", "WARNING", "hot", false, 150};
  a.alarms = {flap, gpu};
  std::vector<NetworkAlarmRecord> history;
  CHECK(RecordNetworkAlarms("m1", a, 10, &history) == 1);
  CHECK(RecordNetworkAlarms("m1", a, 10, &history) == 0);  // idempotent
  a.alarms.push_back(InspectionObservation{"rdma", "mlx5_0/1", "FAULT", "port down", false, 200});
  CHECK(RecordNetworkAlarms("m1", a, 10, &history) == 1);
  CHECK(RecordNetworkAlarms("m2", a, 10, &history) == 2);
  CHECK(NetworkAlarmsWithin(history, "m1", 250, 1000) == 2);
  CHECK(NetworkAlarmsWithin(history, "m1", 250, 100) == 1);
  CHECK(NetworkAlarmsWithin(history, "m3", 250, 1000) == 0);
  CHECK(RecordNetworkAlarms("m3", a, 3, &history) == 2);
  CHECK(history.size() == 3);
}

TEST_CASE("MachineAttributedFault ignores warnings and faults the machine is not blamed for", "[unit]") {
  AgentObservation a;
  a.inspections = {{"host", "/data", "FAULT", "2% free", false, 1}, {"gpu", "gpu0", "WARNING", "hot", true, 1}};
  CHECK_FALSE(MachineAttributedFault(a).has_value());
  a.alarms = {{"xid", "PCI:0000:1b:00", "FAULT", "Xid 79", true, 2}};
  CHECK(MachineAttributedFault(a) == std::string("xid/PCI:0000:1b:00: Xid 79"));
}

}  // namespace
}  // namespace peregrine
