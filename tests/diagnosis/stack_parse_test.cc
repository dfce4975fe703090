#include "diagnosis/stack_parse.h"

#include <string>

#include <catch2/catch.hpp>

#include "tests/diagnosis/stack_fixtures.h"

namespace peregrine {
namespace {

TEST_CASE("stack parse: real gdb 'thread apply all bt' capture", "[unit]") {
  absl::StatusOr<ProcessStack> p = ParseGdbBacktrace(StackFixture("gdb_rank0.txt"));
  REQUIRE(p.ok());
  CHECK(p->tool == "gdb");
  CHECK(p->pid == 6099);
  REQUIRE(p->threads.size() == 2);
  const ThreadStack& helper = p->threads[0];  // gdb prints the highest thread first
  CHECK(helper.thread_id == 6104);
  CHECK(helper.thread_name == "stackdemo");
  REQUIRE(helper.frames.size() == 12);
  CHECK(helper.frames[0].function == "__GI___clock_nanosleep");
  CHECK(helper.frames[0].address == 0x00007fcd720ed545ULL);
  CHECK(helper.frames[0].file == "../sysdeps/unix/sysv/linux/clock_nanosleep.c");
  CHECK(helper.frames[0].line == 48);
  CHECK(helper.frames[3].function == "demo::DataLoaderLoop");
  CHECK(helper.frames[9].function == "??");
  CHECK(helper.frames[9].module == "/lib/x86_64-linux-gnu/libstdc++.so.6");
  const ThreadStack& main = p->threads[1];
  CHECK(main.thread_id == 6099);
  REQUIRE(main.frames.size() == 9);
  // Inlined frame: no address.
  CHECK(main.frames[0].address == 0);
  CHECK(main.frames[0].function == "__futex_abstimed_wait_common64");
  // A template function whose printed name carries its own parameter list.
  CHECK(main.frames[5].function.rfind("std::condition_variable::wait<", 0) == 0);
  CHECK(main.frames[5].line == 102);
  CHECK(main.frames[6].function == "demo::AllReduceGradients");
  CHECK(main.frames[6].file == "/work/main/tests/diagnosis/testdata/stacks/stackdemo.cc");
  CHECK(main.frames[6].line == 34);
  CHECK(main.frames[8].function == "main");
}

TEST_CASE("stack parse: real eu-stack captures, plain and with -m -s", "[unit]") {
  absl::StatusOr<std::vector<ProcessStack>> plain = ParseEuStack(StackFixture("eustack_rank3.txt"));
  REQUIRE(plain.ok());
  REQUIRE(plain->size() == 1);
  const ProcessStack& p = (*plain)[0];
  CHECK(p.pid == 6102);
  CHECK(p.tool == "eu-stack");
  REQUIRE(p.threads.size() == 2);
  CHECK(p.threads[0].thread_id == 6102);
  REQUIRE(p.threads[0].frames.size() == 7);
  CHECK(p.threads[0].frames[0].function == "read");
  CHECK(p.threads[0].frames[1].function == "demo::RecvActivations(int)");
  CHECK(p.threads[0].frames[1].address == 0x00005620c228231bULL);
  CHECK(p.threads[1].frames[9].function == "??");  // address only

  absl::StatusOr<std::vector<ProcessStack>> ms = ParseEuStack(StackFixture("eustack_ms_p2p.txt"));
  REQUIRE(ms.ok());
  const ThreadStack& t = (*ms)[0].threads[0];
  CHECK(t.frames[0].module == "/usr/lib/x86_64-linux-gnu/libc.so.6");
  CHECK(t.frames[0].file == "../sysdeps/unix/sysv/linux/read.c");
  CHECK(t.frames[0].line == 26);
  CHECK(t.frames[1].function == "demo::RecvActivations(int)");
  CHECK(t.frames[1].line == 39);
  CHECK(t.frames[6].function == "_start");
  CHECK(t.frames[6].file.empty());
  const ThreadStack& helper = (*ms)[0].threads[1];
  CHECK(helper.frames[9].function == "??");
  CHECK(helper.frames[9].module == "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30");
  // A template name with spaces and a " - module" suffix.
  CHECK(helper.frames[2].function.rfind("void std::this_thread::sleep_for<", 0) == 0);
  CHECK(helper.frames[2].module == "/tmp/inspect_demo/stackdemo");
}

TEST_CASE("stack parse: py-spy dump with --locals and --subprocesses", "[unit]") {
  absl::StatusOr<std::vector<ProcessStack>> dump = ParsePySpyDump(StackFixture("pyspy_dump_rank5.txt"));
  REQUIRE(dump.ok());
  REQUIRE(dump->size() == 2);
  const ProcessStack& trainer = (*dump)[0];
  CHECK(trainer.pid == 48213);
  CHECK(trainer.command.rfind("/usr/bin/python3 -u pretrain_gpt.py", 0) == 0);
  REQUIRE(trainer.threads.size() == 3);
  const ThreadStack& main = trainer.threads[0];
  CHECK(main.thread_id == 48213);
  CHECK(main.state == "idle");
  CHECK(main.thread_name == "MainThread");
  REQUIRE(main.frames.size() == 10);  // the Arguments/Locals block is not a frame
  CHECK(main.frames[0].function == "wait");
  CHECK(main.frames[0].file == "torch/distributed/distributed_c10d.py");
  CHECK(main.frames[0].line == 1702);
  CHECK(main.frames[9].function == "<module>");
  CHECK(trainer.threads[2].thread_id == 0x7F29E5FFB640LL);
  CHECK(trainer.threads[2].state == "active");
  CHECK(trainer.threads[2].thread_name == "checkpoint-writer");
  const ProcessStack& worker = (*dump)[1];
  CHECK(worker.pid == 48391);
  REQUIRE(worker.threads.size() == 1);
  CHECK(worker.threads[0].frames.back().file == "<string>");
}

TEST_CASE("stack parse: garbage and truncated input are rejected with the line", "[unit]") {
  // No thread anywhere.
  CHECK(!ParseGdbBacktrace("hello\nworld\n").ok());
  CHECK(!ParseEuStack("").ok());
  CHECK(!ParsePySpyDump("").ok());
  CHECK(!ParsePySpyDump("Process 1: python x.py\nPython v3.10.12 (/usr/bin/python3)\n").ok());

  absl::Status s = ParseGdbBacktrace("#0  0x0000 in main () at a.c:1\n").status();
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(s.message().find("line 1") != std::string::npos);
  CHECK(s.message().find("before any 'Thread' header") != std::string::npos);

  s = ParseGdbBacktrace("Thread 1 (Thread 0x7f (LWP 5) \"x\"):\n#0  0xZZ in f () at a.c:1\n")
          .status();
  CHECK(s.message().find("line 2") != std::string::npos);
  s = ParseGdbBacktrace("Thread 1 (Thread 0x7f (LWP 5) \"x\"):\n#0  0x10 in f (a=1 at x.c:3\n")
          .status();
  CHECK(!s.ok());
  s = ParseGdbBacktrace("Thread one (garbage):\n").status();
  CHECK(s.message().find("line 1") != std::string::npos);

  s = ParseEuStack("PID 12 - process\nTID 12:\n#0  nothex main\n").status();
  CHECK(s.message().find("line 3") != std::string::npos);
  s = ParseEuStack("PID x - process\n").status();
  CHECK(s.message().find("malformed PID") != std::string::npos);
  s = ParseEuStack("PID 12 - process\n#0  0x10 main\n").status();
  CHECK(s.message().find("before any 'TID'") != std::string::npos);
  s = ParseEuStack("PID 12 - process\nTID 12:\n#0  0x10 main\n    no-line-number\n").status();
  CHECK(s.message().find("line 4") != std::string::npos);
  s = ParseEuStack("\x01\x02\xff garbage\n").status();
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);

  s = ParsePySpyDump("    forward (model.py:10)\n").status();
  CHECK(s.message().find("line 1") != std::string::npos);
  s = ParsePySpyDump("Process 5: python\nThread 5 idle\n").status();
  CHECK(s.message().find("line 2") != std::string::npos);
  s = ParsePySpyDump("Process 5: python\nThread 5 (idle): \"Main\"\nrandom junk\n").status();
  CHECK(s.message().find("line 3") != std::string::npos);

  // Truncated real capture: cutting a real file mid-line still parses or fails cleanly.
  const std::string real = StackFixture("gdb_rank3.txt");
  for (size_t cut = 0; cut < real.size(); cut += 97) {
    absl::StatusOr<ProcessStack> p = ParseGdbBacktrace(real.substr(0, cut));
    if (!p.ok()) CHECK(p.status().code() == absl::StatusCode::kInvalidArgument);
  }
  const std::string eu = StackFixture("eustack_ms_p2p.txt");
  for (size_t cut = 0; cut < eu.size(); cut += 89) {
    absl::StatusOr<std::vector<ProcessStack>> p = ParseEuStack(eu.substr(0, cut));
    if (!p.ok()) CHECK(p.status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("stack parse: dispatch by tool", "[unit]") {
  CHECK(std::string(StackToolName(StackTool::kEuStack)) == "eu-stack");
  absl::StatusOr<std::vector<ProcessStack>> gdb =
      ParseStackText(StackTool::kGdb, StackFixture("gdb_rank1.txt"));
  REQUIRE(gdb.ok());
  REQUIRE(gdb->size() == 1);
  CHECK((*gdb)[0].pid == 6100);
}

}  // namespace
}  // namespace peregrine
