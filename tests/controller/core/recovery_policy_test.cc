#include "controller/core/recovery_policy.h"

#include <catch2/catch.hpp>
#include <fstream>

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

std::vector<std::string> Sample(const std::string& name) {
  std::ifstream in(std::string(PEREGRINE_SOURCE_DIR "/tests/controller/core/testdata/tracebacks/") + name + ".txt");
  REQUIRE(in);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE_FALSE(lines.empty());
  return lines;
}

std::vector<std::string> LastLines(std::vector<std::string> lines, size_t n) {
  if (lines.size() > n) lines.erase(lines.begin(), lines.end() - static_cast<long>(n));
  return lines;
}

// Real python3 output (testdata/tracebacks/generate.sh wrote it).
TEST_CASE("UserCodeError on real Python output: no header, deep, chained, torchrun-wrapped", "[unit]") {
  struct Case {
    const char* sample;
    size_t tail;  // the last N lines, as an agent's bounded tail keeps them
    std::optional<std::string> want;
  };
  const Case cases[] = {
      {"syntax_error_main", 50, "SyntaxError: invalid syntax"},  // no "Traceback" header at all
      {"indentation_error_import", 50,
       "IndentationError: expected an indented block after function definition on line 1"},
      // 80 frames: the header is ~240 lines up; the last 50 lines still show frames.
      {"deep_type_error", 50, "TypeError: can only concatenate str (not \"int\") to str"},
      {"deep_type_error", 4, "TypeError: can only concatenate str (not \"int\") to str"},
      {"deep_type_error", 1000, "TypeError: can only concatenate str (not \"int\") to str"},
      {"chained_value_error", 50, "ValueError: config is missing batch_size"},
      {"chained_runtime_error", 50, std::nullopt},  // KeyError, then a RuntimeError: not user code
      {"module_not_found", 50, "ModuleNotFoundError: No module named 'flash_attn_not_installed'"},
      {"torchrun_child_failed", 50, "AttributeError: 'Model' object has no attribute 'forward_with_cache'"},
  };
  for (const Case& c : cases) {
    INFO(c.sample << " (last " << c.tail << " lines)");
    CHECK(UserCodeError(LastLines(Sample(c.sample), c.tail)) == c.want);
  }
  // Cut inside the last frame: without a frame line the last line could be any text.
  CHECK(UserCodeError(LastLines(Sample("deep_type_error"), 3)) == std::nullopt);  // no frame line left: any text
  // torchrun's per-rank prefixes ("[rank0]: ", "[default3]:") are ignored.
  for (const char* prefix : {"[rank0]: ", "[default3]:"}) {
    std::vector<std::string> prefixed;
    for (const std::string& line : Sample("deep_type_error")) prefixed.push_back(prefix + line);
    INFO(prefix);
    CHECK(UserCodeError(LastLines(prefixed, 50)) == "TypeError: can only concatenate str (not \"int\") to str");
  }
  // The wrapper alone (the rank's traceback fell out of the tail) is no user-code error.
  CHECK(UserCodeError(LastLines(Sample("torchrun_child_failed"), 24)) == std::nullopt);
  // Garbage: binary noise, a half line, brackets that are no rank prefix.
  CHECK(UserCodeError({"\x7f\x01\x02", "  File \"", "[rank]: TypeError: x", "[0]: Traceback"}) == std::nullopt);
  CHECK(UserCodeError({"  File \"a.py\", line 1", "[1x]: TypeError: x"}) == std::nullopt);
  CHECK(UserCodeError({"  File \"a.py\", line 1", ": TypeError"}) == std::nullopt);
  CHECK(UserCodeError({"  File \"a.py\", line 1", "typeError: lower-case is no exception class"}) == std::nullopt);
}

CodeVersionSpec Code(const std::string& rev) { return CodeVersionSpec{"", {"train", rev}, rev, {}}; }

TEST_CASE("RollbackTarget picks the last healthy earlier version", "[unit]") {
  using H = std::vector<VersionRecord>;
  const H none = {};
  const H only = {{Code("v1"), 1, "initial", VersionOutcome::kHealthy, 0}};
  const H two = {{Code("v1"), 1, "initial", VersionOutcome::kHealthy, 0}, {Code("v2"), 2, "update", VersionOutcome::kRunning, 10}};
  const H skip_unhealthy = {{Code("v1"), 1, "initial", VersionOutcome::kHealthy, 0},
                            {Code("v2"), 2, "update", VersionOutcome::kRunning, 10},
                            {Code("v3"), 3, "update", VersionOutcome::kRunning, 11}};
  const H after_rollback = {{Code("v1"), 1, "initial", VersionOutcome::kHealthy, 0},
                            {Code("v2"), 2, "update", VersionOutcome::kRolledBack, 10},
                            {Code("v1"), 3, "rollback", VersionOutcome::kRunning, 10}};
  const H never_healthy = {{Code("v1"), 1, "initial", VersionOutcome::kRunning, 0}, {Code("v2"), 2, "update", VersionOutcome::kRunning, 0}};
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
  InspectionObservation flap{"network", "sim0", InspectionStatus::kWarning, "1 link flaps", false, 100};
  InspectionObservation gpu{"gpu", "gpu0", InspectionStatus::kWarning, "hot", false, 150};
  a.alarms = {flap, gpu};
  std::vector<NetworkAlarmRecord> history;
  CHECK(RecordNetworkAlarms("m1", a, 10, &history) == 1);
  CHECK(RecordNetworkAlarms("m1", a, 10, &history) == 0);  // idempotent
  a.alarms.push_back(InspectionObservation{"rdma", "mlx5_0/1", InspectionStatus::kFault, "port down", false, 200});
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
  a.inspections = {{"host", "/data", InspectionStatus::kFault, "2% free", false, 1}, {"gpu", "gpu0", InspectionStatus::kWarning, "hot", true, 1}};
  CHECK_FALSE(MachineAttributedFault(a).has_value());
  a.alarms = {{"xid", "PCI:0000:1b:00", InspectionStatus::kFault, "Xid 79", true, 2}};
  CHECK(MachineAttributedFault(a) == std::string("xid/PCI:0000:1b:00: Xid 79"));
}

TEST_CASE("CANNOT_SEE is neither a fault nor a network alarm, even when marked machine-attributed", "[unit]") {
  AgentObservation a;
  a.inspections = {{"xid", "kernel-log", InspectionStatus::kCannotSee, "cannot see the kernel log", true, 1}};
  a.alarms = {{"network", "nic", InspectionStatus::kCannotSee, "sees only the pod's netns", true, 2}};
  CHECK_FALSE(MachineAttributedFault(a).has_value());
  CHECK_FALSE(IsNetworkAlarm(a.alarms[0]));
  std::vector<NetworkAlarmRecord> history;
  CHECK(RecordNetworkAlarms("m1", a, 10, &history) == 0);
  CHECK(ToString(InspectionStatus::kCannotSee) == std::string("CANNOT_SEE"));
  CHECK(ParseInspectionStatus("CANNOT_SEE") == InspectionStatus::kCannotSee);
}

}  // namespace
}  // namespace peregrine
