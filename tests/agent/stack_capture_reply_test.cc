// A capture reply stays bounded: a real tree of 500 descendant processes with deep native
// stacks (bash functions recursing, each waiting on a sleep) is captured with the real
// tools; each process's text is cut with a visible marker and the serialised reply fits
// under gRPC's default 4 MiB message limit, so an oversized reply cannot be lost on the
// way to the controller.
#include <spawn.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/proto_translation.h"
#include "agent/stack_capture.h"
#include "peregrine/v1/agent.pb.h"
#include "tests/testing/eventually.h"
#include "tests/testing/process_guard.h"

extern char** environ;

namespace peregrine {
namespace {

namespace v1 = ::peregrine::v1;
using testing::DescendantGuard;
using testing::Eventually;

TEST_CASE("TruncateStackText cuts with a marker that counts the bytes cut", "[unit]") {
  CHECK(TruncateStackText("short", 100) == "short");
  const std::string cut = TruncateStackText(std::string(1000, 'x'), 200);
  CHECK(cut.size() <= 200);
  CHECK(absl::EndsWith(cut, absl::StrCat("\n... truncated ", 1000 - (200 - 64), " bytes")));
  CHECK(absl::StrContains(TruncateStackText(std::string(1000, 'x'), 200, true), "truncated at least "));
}

TEST_CASE("A reply over its budget gives every process a fair share and marks what it cut", "[unit]") {
  std::vector<CapturedStack> stacks;
  for (int i = 0; i < 100; ++i) {
    CapturedStack s;
    s.pid = 1000 + i;
    s.global_rank = i;
    s.command = "python train.py";
    s.tool = "eu-stack";
    s.raw = i < 50 ? std::string(100 * 1024, 'f') : "#0 0x1 in sleep";  // half huge, half small
    stacks.push_back(s);
  }
  const v1::StackCapture capture = StacksToProto(stacks, 1 << 20);
  CHECK(capture.ByteSizeLong() <= 1u << 20);
  REQUIRE(capture.processes_size() == 100);
  for (int i = 0; i < 100; ++i) {
    const v1::ProcessStacks& p = capture.processes(i);
    if (i < 50) {
      CHECK(absl::StrContains(p.raw(), "... truncated "));
      CHECK(p.raw().size() > 8 * 1024);  // a fair share, not crumbs
    } else {
      CHECK(p.raw() == "#0 0x1 in sleep");  // the small ones keep everything
    }
  }
  // Under the budget nothing changes.
  const std::vector<CapturedStack> few(stacks.begin(), stacks.begin() + 10);
  CHECK(StacksToProto(few).processes(0).raw().size() == 100 * 1024);
}

TEST_CASE("Stacks of 500 descendant processes fit one reply under 4 MiB with truncation markers", "[integration]") {
  if (!std::filesystem::exists("/usr/bin/eu-stack") && !std::filesystem::exists("/usr/bin/gdb")) {
    WARN("neither eu-stack nor gdb is installed");
    return;
  }
  DescendantGuard guard;
  // 500 descendants: 80 bash processes 1500 functions deep (about 80 KB of eu-stack text
  // each, more than the reply holds together), each waiting on its sleep, and 340 plain
  // sleeps.
  const std::string script =
      "for i in $(seq 80); do /bin/bash -c 'f() { if [ $1 -eq 0 ]; then sleep 300; else f $(($1 - 1)); fi; }; f 1500' & "
      "done; for i in $(seq 340); do sleep 300 & done; wait";
  std::vector<char*> argv = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"),
                             const_cast<char*>(script.c_str()), nullptr};
  pid_t root = 0;
  REQUIRE(posix_spawn(&root, "/bin/sh", nullptr, nullptr, argv.data(), environ) == 0);
  std::vector<StackTarget> targets;
  REQUIRE(Eventually([&] {
    targets = WithDescendants({StackTarget{root, 0}});
    return targets.size() >= 501;
  }, absl::Seconds(120)));
  StackCaptureOptions options;
  options.timeout_per_process = absl::Seconds(120);
  std::vector<CapturedStack> captured = CaptureStacks(targets, options);
  REQUIRE(captured.size() == targets.size());
  int cut_per_process = 0;
  for (const CapturedStack& s : captured) {
    CHECK(s.raw.size() <= options.max_raw_bytes);
    cut_per_process += absl::StrContains(s.raw, "... truncated ");
  }
  CHECK(cut_per_process > 0);  // the deep bash stacks are longer than one process's share

  // Unbounded (as before the reply budget), these stacks would not fit gRPC's 4 MiB.
  const size_t unbounded = StacksToProto(captured, std::numeric_limits<size_t>::max()).ByteSizeLong();
  INFO("unbounded reply " << unbounded << " bytes");
  CHECK(unbounded > 4u * 1024 * 1024);

  v1::AgentMessage message;
  v1::CommandResult* result = message.mutable_command_result();
  result->set_command_id("stacks-1");
  *result->mutable_stacks() = StacksToProto(captured);
  const size_t size = message.ByteSizeLong();
  INFO("reply " << size << " bytes for " << captured.size() << " processes");
  CHECK(size <= 4u * 1024 * 1024);  // gRPC's default receive limit
  CHECK(result->stacks().ByteSizeLong() <= kMaxStackReplyBytes);
  int marked = 0, with_frames = 0;
  for (const v1::ProcessStacks& p : result->stacks().processes()) {
    marked += absl::StrContains(p.raw(), "... truncated ") || absl::StrContains(p.raw(), "more processes not captured");
    with_frames += p.threads_size() > 0;
  }
  CHECK(marked > 0);
  CHECK(result->stacks().processes(0).pid() == root);  // the root comes first and stays
  // It reads back as the controller reads it.
  v1::AgentMessage back;
  REQUIRE(back.ParseFromString(message.SerializeAsString()));
  CHECK(back.command_result().stacks().processes_size() == result->stacks().processes_size());
  UNSCOPED_INFO(with_frames << " processes kept their parsed frames");
}

}  // namespace
}  // namespace peregrine
