#include "agent/inspection/kernel_log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include <catch2/catch.hpp>

#include "tests/agent/inspection/test_util.h"

namespace peregrine {
namespace {

using testing::Find;
using testing::Fixture;
using testing::TempDir;

const absl::Time kNow = absl::FromUnixSeconds(1700000000);

TEST_CASE("kernel log: /dev/kmsg records", "[unit]") {
  absl::StatusOr<KmsgRecord> r = ParseKmsgRecord(
      "4,2400,91000000001,-;NVRM: Xid (PCI:0000:db:00): 79, pid='<unknown>', name=<unknown>, "
      "GPU has fallen off the bus.");
  REQUIRE(r.ok());
  CHECK(r->level == 4);
  CHECK(r->facility == 0);
  CHECK(r->sequence == 2400);
  CHECK(r->timestamp_us == 91000000001);
  CHECK(r->message.rfind("NVRM: Xid", 0) == 0);
  // Userspace facility (LOG_USER = 1): prio 14 = 1 << 3 | 6; extra prefix fields allowed.
  r = ParseKmsgRecord("14,7,100,-,caller=T1;hello");
  REQUIRE(r.ok());
  CHECK(r->facility == 1);
  CHECK(r->level == 6);
  CHECK(r->message == "hello");
  CHECK(ParseKmsgRecord("no separator").status().message().find("';'") != std::string::npos);
  CHECK(ParseKmsgRecord("x,1,2,-;msg").status().message().find("priority") != std::string::npos);
  CHECK(ParseKmsgRecord("6,1;msg").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ParseKmsgRecord("6,1,-5,-;msg").status().message().find("timestamp") != std::string::npos);

  absl::StatusOr<KmsgRecord> d = ParseDmesgLine("[86400.123456] NVRM: Xid (PCI:0000:3a:00): 13, x");
  REQUIRE(d.ok());
  CHECK(d->timestamp_us == 86400123456);
  CHECK(!ParseDmesgLine("no brackets").ok());
  CHECK(!ParseDmesgLine("[abc] x").ok());
}

TEST_CASE("kernel log: a dmesg time beyond int64 microseconds or inf or nan is malformed, not cast (fuzz finding)", "[unit]") {
  const std::string huge = "[" + std::string(66, '9') + ".5] NVRM: Xid (PCI:0000:3a:00): 79, x";
  for (const std::string& line : {huge, std::string("[inf] x"), std::string("[nan] x"), std::string("[9.3e12] x")}) {
    INFO(line);
    const absl::StatusOr<KmsgRecord> d = ParseDmesgLine(line);
    CHECK(d.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(d.status().message().find("timestamp malformed") != std::string::npos);
  }
  const absl::StatusOr<KmsgRecord> largest = ParseDmesgLine("[9200000000000] x");
  REQUIRE(largest.ok());
  CHECK(largest->timestamp_us == int64_t{9'200'000'000'000'000'000});
}

TEST_CASE("kernel log: Xid lines and their classes", "[unit]") {
  absl::StatusOr<std::optional<XidEvent>> x = ParseXid(
      "NVRM: Xid (PCI:0000:3a:00): 13, pid=48213, name=python3, Graphics SM Warp Exception on "
      "(GPC 1, TPC 2, SM 0): Out Of Range Address");
  REQUIRE(x.ok());
  REQUIRE(x->has_value());
  CHECK((*x)->pci == "PCI:0000:3a:00");
  CHECK((*x)->xid == 13);
  CHECK((*x)->pid == 48213);
  CHECK((*x)->process_name == "python3");
  CHECK((*x)->detail.rfind("Graphics SM Warp Exception", 0) == 0);
  // Older drivers: no pid=/name=.
  x = ParseXid("NVRM: Xid (PCI:0000:10:1c): 63, Row Remapper: New row marked for remapping");
  REQUIRE(x.ok());
  CHECK((*x)->xid == 63);
  CHECK(!(*x)->pid.has_value());
  CHECK((*x)->detail == "Row Remapper: New row marked for remapping");
  x = ParseXid("NVRM: Xid (PCI:0000:db:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.");
  REQUIRE(x.ok());
  CHECK(!(*x)->pid.has_value());
  CHECK((*x)->detail == "GPU has fallen off the bus.");
  // Not an Xid line.
  x = ParseXid("EXT4-fs (sda1): mounted filesystem");
  REQUIRE(x.ok());
  CHECK(!x->has_value());
  // Malformed Xid lines.
  CHECK(!ParseXid("NVRM: Xid (PCI:0000:db:00 79").ok());
  CHECK(!ParseXid("NVRM: Xid (PCI:0000:db:00): seventy-nine, GPU gone").ok());

  // NVIDIA's Xid catalogue: reset / reboot -> machine-fatal; restart the app -> application;
  // corrected, contained or deferred to the next reset -> recoverable.
  for (int fatal : {46, 48, 62, 64, 74, 79, 95, 119, 120, 140}) {
    INFO("Xid " << fatal);
    CHECK(ClassifyXid(fatal) == XidClass::kMachineFatal);
  }
  for (int app : {13, 31, 43, 45}) CHECK(ClassifyXid(app) == XidClass::kApplication);
  for (int recoverable : {8, 63, 92, 94}) {
    INFO("Xid " << recoverable);
    CHECK(ClassifyXid(recoverable) == XidClass::kRecoverable);
  }
  // Xid 154 carries its recovery action.
  auto event = [](const char* message) {
    absl::StatusOr<std::optional<XidEvent>> e = ParseXid(message);
    REQUIRE(e.ok());
    REQUIRE(e->has_value());
    return **e;
  };
  CHECK(ClassifyXidEvent(event("NVRM: Xid (PCI:0000:17:00): 154, GPU recovery action changed from 0x0 (None) to "
                               "0x1 (GPU Reset Required)")) == XidClass::kMachineFatal);
  CHECK(ClassifyXidEvent(event("NVRM: Xid (PCI:0000:17:00): 154, GPU recovery action changed from 0x0 (None) to "
                               "0x2 (Node Reboot Required)")) == XidClass::kMachineFatal);
  CHECK(ClassifyXidEvent(event("NVRM: Xid (PCI:0000:17:00): 154, GPU recovery action changed from 0x1 (GPU Reset "
                               "Required) to 0x0 (None)")) == XidClass::kRecoverable);
  CHECK(ClassifyXidEvent(event("NVRM: Xid (PCI:0000:17:00): 154, garbled")) == XidClass::kRecoverable);
  CHECK(ClassifyXidEvent(event("NVRM: Xid (PCI:0000:17:00): 95, pid=7, name=python3, Uncontained: FBHUB. RST: Yes, "
                               "D-RST: No")) == XidClass::kMachineFatal);
  CHECK(std::string(XidDescription(79)) == "GPU has fallen off the bus");

  CHECK(ParseBlockIoError("blk_update_request: I/O error, dev nvme1n1, sector 209715200 op 0x1:(WRITE)") ==
        "nvme1n1");
  CHECK(ParseBlockIoError("Buffer I/O error on dev sdb1, logical block 0, async page read") == "sdb1");
  CHECK(ParseBlockIoError("EXT4-fs error (device sda1): ext4_find_entry:1455: inode #2") == "sda1");
  CHECK(!ParseBlockIoError("EXT4-fs (sda1): mounted filesystem with ordered data mode").has_value());
}

TEST_CASE("kernel log: inspection over a kmsg-format file, read incrementally", "[integration]") {
  TempDir dir;
  const std::string path = dir.Write("kmsg", Fixture("kmsg_xid.txt"));
  KernelLogOptions options;
  options.kmsg_path = path;
  options.dmesg = "";
  KernelLogInspection inspection(options);
  std::vector<InspectionResult> rs = inspection.Run(kNow);
  const InspectionResult* fallen = Find(rs, "PCI:0000:db:00");
  REQUIRE(fallen != nullptr);
  CHECK(fallen->kind == "xid");
  CHECK(fallen->status == InspectionOutcome::kFault);
  CHECK(fallen->machine_attributed);
  CHECK(fallen->details.at("xid") == "79");
  // Xid 63 (a row remapping recorded, applied at the next reset) and 94 (a contained ECC
  // error) leave the GPU usable: a warning, not the machine's fault.
  const InspectionResult* remap = Find(rs, "PCI:0000:5d:00");
  REQUIRE(remap != nullptr);
  CHECK(remap->status == InspectionOutcome::kWarning);
  CHECK(!remap->machine_attributed);
  CHECK(remap->details.at("class") == "recoverable");
  const InspectionResult* contained = Find(rs, "PCI:0000:9b:00");
  REQUIRE(contained != nullptr);
  CHECK(contained->status == InspectionOutcome::kWarning);
  CHECK(!contained->machine_attributed);
  CHECK_THAT(contained->summary, Catch::Contains("Xid 94 (recoverable)"));
  // Xid 95 (uncontained ECC) and 154 asking for a GPU reset are the machine's.
  for (const char* pci : {"PCI:0000:ab:00", "PCI:0000:17:00"}) {
    INFO(pci);
    const InspectionResult* r = Find(rs, pci);
    REQUIRE(r != nullptr);
    CHECK(r->status == InspectionOutcome::kFault);
    CHECK(r->machine_attributed);
    CHECK(r->details.at("class") == "machine_fatal");
  }
  const InspectionResult* app = Find(rs, "PCI:0000:3a:00");
  REQUIRE(app != nullptr);
  CHECK(app->status == InspectionOutcome::kWarning);
  CHECK(!app->machine_attributed);
  CHECK(app->details.at("class") == "application");
  const InspectionResult* disk = Find(rs, "/dev/nvme1n1");
  REQUIRE(disk != nullptr);
  CHECK(disk->kind == "host");
  CHECK(disk->status == InspectionOutcome::kFault);
  CHECK(disk->machine_attributed);

  // Second run with nothing new: fatal Xids and disk errors stay; application Xids were
  // reported once.
  rs = inspection.Run(kNow + absl::Seconds(10));
  CHECK(Find(rs, "PCI:0000:db:00") != nullptr);
  CHECK(Find(rs, "PCI:0000:3a:00") == nullptr);

  // Appended records (one garbled) are read on the next run; the garbled one is reported as
  // an inspection ERROR without hiding the real event.
  {
    std::ofstream out(path, std::ios::app);
    out << "4,2500,92000000000,-;NVRM: Xid (PCI:0000:18:00): 8, pid=1, name=python3, Channel 1\n";
    out << "this is not a kmsg record\n";
  }
  rs = inspection.Run(kNow + absl::Seconds(20));
  const InspectionResult* recoverable = Find(rs, "PCI:0000:18:00");
  REQUIRE(recoverable != nullptr);
  CHECK(recoverable->status == InspectionOutcome::kWarning);
  CHECK(recoverable->details.at("class") == "recoverable");
  const InspectionResult* err = Find(rs, "kernel-log");
  REQUIRE(err != nullptr);
  CHECK(err->status == InspectionOutcome::kError);
  CHECK(err->summary.find("1 unparseable") != std::string::npos);
}

TEST_CASE("kernel log: records logged before the agent started do not count", "[integration]") {
  TempDir dir;
  // An Xid 79 from an earlier job (t = 1 s after boot), then, after the agent's start at
  // t = 2 s, a recoverable Xid 63 on another GPU.
  const std::string path = dir.Write("kmsg",
                                     "3,10,1000000,-;NVRM: Xid (PCI:0000:db:00): 79, pid=1, name=old, GPU has fallen off the bus.\n"
                                     "4,11,3000000,-;NVRM: Xid (PCI:0000:5d:00): 63, pid=2, name=train, Row Remapper\n");
  KernelLogOptions options;
  options.kmsg_path = path;
  options.dmesg = "";
  options.ignore_before_us = 2000000;
  KernelLogInspection inspection(options);
  std::vector<InspectionResult> rs = inspection.Run(kNow);
  CHECK(Find(rs, "PCI:0000:db:00") == nullptr);
  REQUIRE(Find(rs, "PCI:0000:5d:00") != nullptr);
  CHECK(Find(rs, "PCI:0000:5d:00")->status == InspectionOutcome::kWarning);
  // Without the bound the old machine-fatal Xid would count.
  options.ignore_before_us = -1;
  KernelLogInspection everything(options);
  rs = everything.Run(kNow);
  REQUIRE(Find(rs, "PCI:0000:db:00") != nullptr);
  CHECK(Find(rs, "PCI:0000:db:00")->status == InspectionOutcome::kFault);
}

TEST_CASE("kernel log: the real /dev/kmsg of this machine", "[integration]") {
  KernelLogInspection inspection(KernelLogOptions{});
  const std::vector<InspectionResult> rs = inspection.Run(kNow);
  REQUIRE(!rs.empty());
  for (const auto& r : rs) {
    INFO(r.DebugString());
    // Whatever this machine logged, nothing here may be a parse error of a real record.
    CHECK((r.status != InspectionOutcome::kError || r.summary.find("cannot read") != std::string::npos));
  }
}

TEST_CASE("kernel log: dmesg fallback when /dev/kmsg cannot be opened", "[integration]") {
  TempDir dir;
  const std::string fake_dmesg = dir.Write(
      "dmesg", "#!/bin/sh\ncat '" + testing::FixturePath("dmesg_xid.txt") + "'\n", true);
  KernelLogOptions options;
  options.kmsg_path = dir.path() + "/no-such-kmsg";
  options.dmesg = fake_dmesg;
  KernelLogInspection inspection(options);
  std::vector<InspectionResult> rs = inspection.Run(kNow);
  REQUIRE(Find(rs, "PCI:0000:db:00") != nullptr);
  CHECK(Find(rs, "PCI:0000:db:00")->status == InspectionOutcome::kFault);
  CHECK(Find(rs, "PCI:0000:3a:00") != nullptr);
  // dmesg prints everything again; only newer records count.
  rs = inspection.Run(kNow + absl::Seconds(10));
  CHECK(Find(rs, "PCI:0000:3a:00") == nullptr);
  CHECK(Find(rs, "PCI:0000:db:00") != nullptr);

  options.dmesg = "";
  KernelLogInspection unreadable(options);
  rs = unreadable.Run(kNow);
  REQUIRE(rs.size() == 1);
  CHECK(rs[0].status == InspectionOutcome::kCannotSee);
  CHECK(rs[0].summary.find("no-such-kmsg") != std::string::npos);
}

TEST_CASE("kernel log: a pod without CAP_SYSLOG cannot see the log and says so, never a silent pass", "[integration]") {
  TempDir dir;
  // What util-linux dmesg prints when kernel.dmesg_restrict=1 and CAP_SYSLOG is missing.
  const std::string fake_dmesg = dir.Write(
      "dmesg", "#!/bin/sh\necho 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n", true);
  KernelLogOptions options;
  options.kmsg_path = dir.path() + "/no-such-kmsg";
  options.dmesg = fake_dmesg;
  KernelLogInspection inspection(options);
  for (int run = 0; run < 2; ++run) {  // the second run does not turn into a pass either
    const std::vector<InspectionResult> rs = inspection.Run(kNow + absl::Seconds(run));
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].component == "kernel-log");
    CHECK(rs[0].status == InspectionOutcome::kCannotSee);
    CHECK(!rs[0].machine_attributed);
    CHECK(rs[0].details.at("reason").find("Operation not permitted") != std::string::npos);
    CHECK(rs[0].summary.find("cannot see the kernel log") != std::string::npos);
    CHECK(InspectionSeverity(rs[0].status) == 0);  // never alarms
  }
  if (geteuid() != 0) {  // a file this user may not open: EACCES, as /dev/kmsg without CAP_SYSLOG
    const std::string locked = dir.Write("kmsg", "");
    REQUIRE(chmod(locked.c_str(), 0) == 0);
    options.kmsg_path = locked;
    options.dmesg = "";
    KernelLogInspection denied(options);
    const std::vector<InspectionResult> rs = denied.Run(kNow);
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].status == InspectionOutcome::kCannotSee);
    CHECK(rs[0].details.at("reason").find("Permission denied") != std::string::npos);
  }
}

TEST_CASE("kernel log: PCI bus ids in the Xid and nvidia-smi forms normalise alike", "[unit]") {
  CHECK(NormalizePciBusId("PCI:0000:3b:00") == "0000:3b:00");
  CHECK(NormalizePciBusId("00000000:3B:00.0") == "0000:3b:00");
  CHECK(NormalizePciBusId("0000:3b:00.0") == "0000:3b:00");
  CHECK(NormalizePciBusId("00000001:DB:1F.0") == "0001:db:1f");
  CHECK(!NormalizePciBusId("").has_value());
  CHECK(!NormalizePciBusId("GPU 0").has_value());
  CHECK(!NormalizePciBusId("0000:3b").has_value());
  CHECK(!NormalizePciBusId("0000:3bb:00").has_value());
  CHECK(!NormalizePciBusId("0000:3b:20").has_value());  // device numbers have 5 bits
  CHECK(!NormalizePciBusId("0000:3b:00.x").has_value());
  absl::StatusOr<std::vector<std::string>> ids = ParseGpuBusIds("00000000:3B:00.0\n00000000:DB:00.0\n");
  REQUIRE(ids.ok());
  CHECK(*ids == std::vector<std::string>{"0000:3b:00", "0000:db:00"});
  absl::StatusOr<std::vector<std::string>> bad = ParseGpuBusIds("00000000:3B:00.0\nNo devices were found\n");
  REQUIRE(!bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("line 2"));
  // An Xid line whose parenthesised part is not a bus id names no device.
  absl::StatusOr<std::optional<XidEvent>> x = ParseXid("NVRM: Xid (GPU 0): 79, GPU has fallen off the bus.");
  REQUIRE(x.ok());
  REQUIRE(x->has_value());
  CHECK((*x)->pci.empty());
  CHECK((*x)->xid == 79);
}

TEST_CASE("kernel log: only Xids of this pod's GPUs count: another pod's GPU is skipped", "[integration]") {
  TempDir dir;
  // The node has GPUs 3b and db; this pod owns 3b (nvidia-smi's 8-digit upper-case form).
  const std::string path = dir.Write(
      "kmsg", "3,10,5000000,-;NVRM: Xid (PCI:0000:db:00): 79, pid=1, name=python3, GPU has fallen off the bus.\n");
  KernelLogOptions options;
  options.kmsg_path = path;
  options.dmesg = "";
  options.gpu_bus_ids = std::vector<std::string>{"00000000:3B:00.0"};
  KernelLogInspection inspection(options);
  std::vector<InspectionResult> rs = inspection.Run(kNow);
  CHECK(Find(rs, "PCI:0000:db:00") == nullptr);
  const InspectionResult* ok = Find(rs, "kernel-log");
  REQUIRE(ok != nullptr);
  CHECK(ok->status == InspectionOutcome::kOk);
  CHECK(ok->details.at("other_gpu_xids_skipped") == "1");
  // Then this pod's own GPU falls off the bus: a machine fault.
  {
    std::ofstream out(path, std::ios::app);
    out << "3,11,6000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=2, name=python3, GPU has fallen off the bus.\n";
  }
  rs = inspection.Run(kNow + absl::Seconds(1));
  const InspectionResult* own = Find(rs, "PCI:0000:3b:00");
  REQUIRE(own != nullptr);
  CHECK(own->status == InspectionOutcome::kFault);
  CHECK(own->machine_attributed);
  CHECK(Find(rs, "PCI:0000:db:00") == nullptr);
}

TEST_CASE("kernel log: this pod's GPUs learned from nvidia-smi: an Xid naming no GPU counts, said so", "[integration]") {
  TempDir dir;
  const std::string smi = dir.Write("nvidia-smi",
                                    "#!/bin/sh\n"
                                    "[ \"$1\" = --query-gpu=pci.bus_id ] && [ \"$2\" = --format=csv,noheader ] || exit 2\n"
                                    "printf '00000000:3B:00.0\\n'\n",
                                    true);
  const std::string path = dir.Write("kmsg",
                                     "3,10,5000000,-;NVRM: Xid (PCI:0000:db:00): 48, pid=1, name=python3, DBE\n"
                                     "3,11,5000001,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=2, name=python3, DBE\n"
                                     "3,12,5000002,-;NVRM: Xid (GPU ?): 95, pid=3, name=python3, Uncontained\n");
  KernelLogOptions options;
  options.kmsg_path = path;
  options.dmesg = "";
  options.nvidia_smi = smi;
  KernelLogInspection inspection(options);
  const std::vector<InspectionResult> rs = inspection.Run(kNow);
  CHECK(Find(rs, "PCI:0000:db:00") == nullptr);
  REQUIRE(Find(rs, "PCI:0000:3b:00") != nullptr);
  CHECK(Find(rs, "PCI:0000:3b:00")->status == InspectionOutcome::kFault);
  const InspectionResult* anonymous = Find(rs, "unknown-gpu");
  REQUIRE(anonymous != nullptr);
  CHECK(anonymous->status == InspectionOutcome::kFault);
  CHECK_THAT(anonymous->summary, Catch::Contains("names no GPU: counted against this machine"));

  // Without nvidia-smi the pod's GPUs are unknown: every Xid counts, and the result says why.
  options.nvidia_smi = dir.path() + "/no-such-nvidia-smi";
  KernelLogInspection unknown(options);
  const std::vector<InspectionResult> all = unknown.Run(kNow);
  REQUIRE(Find(all, "PCI:0000:db:00") != nullptr);
  CHECK(Find(all, "PCI:0000:db:00")->status == InspectionOutcome::kFault);
  CHECK_THAT(Find(all, "PCI:0000:db:00")->summary, Catch::Contains("this pod's GPUs are unknown"));
}

}  // namespace
}  // namespace peregrine
