#include "agent/failslow_monitor.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/nccl_ring/ring_format.h"

// How the monitor reads the rings (Falcon-Detect section 4.2, agent side). Poll() reads
// every ring:
//  - traffic calls feed one IterationTracker per process (ACF period -> iteration times),
//    and each iteration time past the warm-up (IterationWarmup) feeds that rank's
//    FailSlowDetector (BOCD + verification); verified changes come back as
//    peregrine.v1.FailSlowEvent (slowdown start / end / level shift) with onset times in
//    Unix nanoseconds;
//  - while profiling is on (SetMode), each traffic call enters a bounded per-communicator
//    window indexed by its call number, and its duration is attached whenever its
//    completion arrives (the hook's CUDA resolver appends device times late and out of
//    order): the CUDA-event duration when there is one, else the host time in the call.
//    A group's completion (GroupEnd's device time or host exit) is attached to every
//    operation issued in the group (they run as one fused launch; an operation's own host
//    exit inside a group only measures queuing). FillCommProfiles() copies the collectives
//    that have a duration into a heartbeat: enter_time is this host's clock and
//    exit_time - enter_time the duration; only the duration is meant to be compared
//    across hosts;
//  - rings of processes that have exited are read one last time and deleted; stale rings
//    of dead processes left by an earlier agent are deleted unread.
// Mode changes (profiling, trap) are written into every open ring and into rings opened
// later, so processes started after the change follow it.

namespace peregrine {
namespace {

namespace ring = ::peregrine::nccl_ring;

constexpr size_t kMaxPendingCalls = 4096;
constexpr size_t kMaxSampleStarts = 4096;

uint64_t DataTypeBytes(uint8_t datatype) {
  switch (datatype) {
    case 0: case 1: case 10: case 11: return 1;  // int8, uint8, fp8 e4m3/e5m2
    case 6: case 9: return 2;                    // half, bfloat16
    case 2: case 3: case 7: return 4;            // int32, uint32, float
    case 4: case 5: case 8: return 8;            // int64, uint64, double
    default: return 1;
  }
}

v1::FailSlowEvent::Kind ToWire(FailSlowEventKind kind) {
  switch (kind) {
    case FailSlowEventKind::kSlowdownStart: return v1::FailSlowEvent::KIND_SLOWDOWN_START;
    case FailSlowEventKind::kSlowdownEnd: return v1::FailSlowEvent::KIND_SLOWDOWN_END;
    case FailSlowEventKind::kLevelShift: return v1::FailSlowEvent::KIND_LEVEL_SHIFT;
  }
  return v1::FailSlowEvent::KIND_UNSPECIFIED;
}

std::string OpName(uint8_t op) {
  std::string name = NcclOpName(op);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name;
}

}  // namespace

struct FailSlowMonitor::Ring {
  std::unique_ptr<NcclRingReader> reader;
  int global_rank = -1;
  uint64_t cursor = 0;
  bool applied_profiling = false;
  bool applied_trap = false;
  std::optional<IterationTracker> tracker;
  std::optional<FailSlowDetector> detector;
  std::optional<IterationWarmup> warmup;
  uint32_t pattern_epoch = 0;  // of the series the warm-up is running on
  uint64_t iterations = 0;
  double last_iteration_seconds = 0;
  // Start time (monotonic) of sample i is sample_starts[i - first_sample_index].
  std::deque<int64_t> sample_starts;
  int64_t first_sample_index = 0;
  std::map<uint64_t, CallRef> pending;                 // traffic calls by ring seq, profiling only
  std::map<uint64_t, std::vector<CallRef>> groups;     // outermost GroupEnd seq -> its operations
  std::vector<CallRef> open_group;                     // in-group calls since the last group end
  std::map<uint64_t, CommWindow> windows;              // by comm id
  // Since the process started (every traffic record, profiling or not): collectives per
  // communicator, and sends/recvs per (communicator, op, peer), for cross-rank matching.
  std::map<uint64_t, uint64_t> collectives_seen;
  std::map<std::tuple<uint64_t, uint8_t, int>, uint64_t> p2p_seen;
  bool inside_call = false;           // last call record had no host exit yet (profiling)
  uint64_t pause_write_index = 0;     // at the previous CheckPaused
  bool pause_checked = false;
};

void AddNcclHookEnvironment(const std::string& hook_path, const std::string& ring_dir, bool profiling, bool trap,
                            std::vector<std::string>* env) {
  if (hook_path.empty()) return;
  auto set = [env](const std::string& key, const std::string& value) {
    const std::string prefix = key + "=";
    for (std::string& entry : *env) {
      if (entry.rfind(prefix, 0) == 0) {
        entry = prefix + value;
        return;
      }
    }
    env->push_back(prefix + value);
  };
  std::string preload = hook_path;
  for (const std::string& entry : *env) {
    if (entry.rfind("LD_PRELOAD=", 0) == 0 && entry.size() > 11) {
      const std::string existing = entry.substr(11);
      if (existing.find(hook_path) == std::string::npos) preload = absl::StrCat(hook_path, ":", existing);
      else preload = existing;
    }
  }
  set("LD_PRELOAD", preload);
  set("PEREGRINE_NCCL_RING_DIR", ring_dir);
  if (profiling) set("PEREGRINE_NCCL_PROFILING", "1");
  if (trap) set("PEREGRINE_NCCL_TRAP", "1");
}

int RemoveDeadAgentRingDirs(const std::string& parent) {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    const size_t dash = name.rfind('-');
    if (name.rfind("peregrine-nccl-", 0) != 0 || dash == std::string::npos || !e.is_directory(ec)) continue;
    int pid = 0;
    if (!absl::SimpleAtoi(name.substr(dash + 1), &pid) || pid <= 0) continue;
    if (::kill(pid, 0) == 0 || errno == EPERM) continue;
    std::error_code rm;
    std::filesystem::remove_all(e.path(), rm);
    if (!rm) ++removed;
  }
  return removed;
}

absl::StatusOr<IterationWarmup> IterationWarmup::Create(const WarmupOptions& o) {
  if (o.window < 1) return absl::InvalidArgumentError(absl::StrCat("warmup.window must be >= 1, got ", o.window));
  if (o.min_iterations < 2 * o.window) {
    return absl::InvalidArgumentError(absl::StrCat("warmup.min_iterations must be >= 2 * window (", 2 * o.window,
                                                   "), got ", o.min_iterations));
  }
  if (!(o.stable_fraction > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("warmup.stable_fraction must be > 0, got ", o.stable_fraction));
  }
  if (o.max_iterations < o.min_iterations) {
    return absl::InvalidArgumentError(absl::StrCat("warmup.max_iterations must be >= min_iterations (",
                                                   o.min_iterations, "), got ", o.max_iterations));
  }
  return IterationWarmup(o);
}

bool IterationWarmup::Settled() const {
  const size_t w = static_cast<size_t>(options_.window);
  if (recent_.size() < 2 * w) return false;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  const double earlier = median(std::vector<double>(recent_.begin(), recent_.begin() + w));
  const double latest = median(std::vector<double>(recent_.begin() + w, recent_.end()));
  return std::abs(latest - earlier) <= options_.stable_fraction * earlier;
}

bool IterationWarmup::Accept(double seconds) {
  if (done_) return true;
  if (!std::isfinite(seconds) || seconds <= 0) return false;
  if (dropped_ >= options_.max_iterations || (dropped_ >= options_.min_iterations && Settled())) {
    done_ = true;
    recent_.clear();
    return true;
  }
  recent_.push_back(seconds);
  while (recent_.size() > 2 * static_cast<size_t>(options_.window)) recent_.pop_front();
  ++dropped_;
  return false;
}

absl::StatusOr<std::unique_ptr<FailSlowMonitor>> FailSlowMonitor::Create(FailSlowMonitorOptions options) {
  if (options.ring_dir.empty()) return absl::InvalidArgumentError("fail-slow monitor: ring_dir is empty");
  if (options.profile_window == 0) return absl::InvalidArgumentError("fail-slow monitor: profile_window must be > 0");
  if (auto t = IterationTracker::Create(options.tracker); !t.ok()) return t.status();
  if (auto w = IterationWarmup::Create(options.warmup); !w.ok()) return w.status();
  if (auto d = FailSlowDetector::Create(options.detector); !d.ok()) return d.status();
  std::error_code ec;
  std::filesystem::create_directories(options.ring_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("fail-slow monitor: cannot create ", options.ring_dir, ": ", ec.message()));
  return std::unique_ptr<FailSlowMonitor>(new FailSlowMonitor(std::move(options)));
}

FailSlowMonitor::FailSlowMonitor(FailSlowMonitorOptions options) : options_(std::move(options)) {}
FailSlowMonitor::~FailSlowMonitor() {
  rings_.clear();  // unmap before unlinking
  if (!options_.remove_ring_dir_on_exit) return;
  std::error_code ec;
  std::filesystem::remove_all(options_.ring_dir, ec);  // best effort: nothing to report to
}

FailSlowMonitor::PauseCheck FailSlowMonitor::CheckPaused() {
  PauseCheck out;
  out.paused = true;
  std::vector<std::string> waiting;
  for (auto& [path, r] : rings_) {
    ++out.rings;
    const NcclRingInfo info = r->reader->Info();
    const bool stable = r->pause_checked && info.write_index == r->pause_write_index;
    r->pause_write_index = info.write_index;
    r->pause_checked = true;
    const bool held = info.trapped_now > 0 || (info.profiling && r->inside_call);
    if (stable && held && trap_) continue;
    out.paused = false;
    waiting.push_back(absl::StrCat("rank ", r->global_rank, " (pid ", info.pid, "): ",
                                   !trap_ ? "trap is off"
                                   : !stable ? "still issuing NCCL calls"
                                             : "neither waiting in the trap nor blocked inside a call"));
  }
  if (!trap_) out.paused = false;
  out.waiting_for = absl::StrJoin(waiting, "; ");
  if (!trap_ && waiting.empty()) out.waiting_for = "trap is off";
  return out;
}

std::vector<NcclRingFailure> FailSlowMonitor::TakeRingFailures() {
  std::vector<NcclRingFailure> out;
  out.swap(new_failures_);
  return out;
}

absl::Status FailSlowMonitor::ResetRing(Ring& r) const {
  auto tracker = IterationTracker::Create(options_.tracker);
  if (!tracker.ok()) return tracker.status();
  auto detector = FailSlowDetector::Create(options_.detector);
  if (!detector.ok()) return detector.status();
  auto warmup = IterationWarmup::Create(options_.warmup);
  if (!warmup.ok()) return warmup.status();
  r.tracker.emplace(std::move(*tracker));
  r.detector.emplace(std::move(*detector));
  r.warmup.emplace(std::move(*warmup));
  r.pattern_epoch = 0;
  r.iterations = 0;
  r.last_iteration_seconds = 0;
  r.sample_starts.clear();
  r.first_sample_index = 0;
  return absl::OkStatus();
}

void FailSlowMonitor::Reset() {
  for (auto& [path, r] : rings_) {
    ResetRing(*r).IgnoreError();  // options were validated in Create
    r->pending.clear();
    r->groups.clear();
    r->open_group.clear();
    r->windows.clear();
  }
}

absl::Status FailSlowMonitor::SetDetectorOptions(const FailSlowDetectorOptions& detector) {
  if (auto d = FailSlowDetector::Create(detector); !d.ok()) return d.status();
  options_.detector = detector;
  Reset();
  return absl::OkStatus();
}

void FailSlowMonitor::SetMode(bool profiling, bool trap) {
  if (trap != trap_) {
    for (auto& [path, r] : rings_) r->pause_checked = false;
  }
  if (profiling && !profiling_) {
    for (auto& [path, r] : rings_) {
      r->pending.clear();
      r->groups.clear();
      r->open_group.clear();
      r->windows.clear();
    }
  }
  profiling_ = profiling;
  trap_ = trap;
  for (auto& [path, r] : rings_) {
    if (r->applied_profiling != profiling_) r->reader->SetProfiling(profiling_);
    if (r->applied_trap != trap_) r->reader->SetTrap(trap_);
    r->applied_profiling = profiling_;
    r->applied_trap = trap_;
  }
}

std::vector<v1::FailSlowEvent> FailSlowMonitor::Poll(int64_t unix_now_ns, int64_t monotonic_now_ns) {
  std::vector<v1::FailSlowEvent> out;
  const int64_t offset = unix_now_ns - monotonic_now_ns;
  auto files = ListNcclRings(options_.ring_dir);
  if (!files.ok()) return out;  // the directory appears with the first training process
  if (auto failures = ListNcclRingFailures(options_.ring_dir); failures.ok()) {
    for (NcclRingFailure& f : *failures) {
      if (!failures_seen_.count(f.path)) {
        failures_seen_[f.path] = true;
        ++stats_.ring_failures;
        new_failures_.push_back(f);
      }
      if (!f.process_alive && RemoveNcclRing(f.path).ok()) failures_seen_.erase(f.path);
    }
  }
  std::map<std::string, bool> alive;
  for (const NcclRingFile& f : *files) alive[f.path] = f.process_alive;
  // Open new rings of live processes; delete leftovers of dead ones we never read.
  for (const NcclRingFile& f : *files) {
    if (rings_.count(f.path)) continue;
    if (!f.process_alive) {
      if (RemoveNcclRing(f.path).ok()) ++stats_.rings_removed;
      continue;
    }
    auto reader = NcclRingReader::Open(f.path);
    if (!reader.ok()) continue;  // not initialised yet: next poll
    auto r = std::make_unique<Ring>();
    r->reader = std::move(*reader);
    r->global_rank = r->reader->Info().global_rank;
    if (!ResetRing(*r).ok()) continue;
    if (profiling_) r->reader->SetProfiling(true);
    if (trap_) r->reader->SetTrap(true);
    r->applied_profiling = profiling_;
    r->applied_trap = trap_;
    ++stats_.rings_opened;
    rings_.emplace(f.path, std::move(r));
  }
  for (auto it = rings_.begin(); it != rings_.end();) {
    Consume(*it->second, offset, out);
    auto a = alive.find(it->first);
    if (a == alive.end() || !a->second) {
      // The process exited: its records are read; the file goes.
      if (a != alive.end() && RemoveNcclRing(it->first).ok()) ++stats_.rings_removed;
      it = rings_.erase(it);
    } else {
      ++it;
    }
  }
  stats_.events += out.size();
  return out;
}

void FailSlowMonitor::Consume(Ring& r, int64_t offset, std::vector<v1::FailSlowEvent>& out) {
  NcclPollResult polled = r.reader->Poll(r.cursor, options_.max_records_per_poll);
  r.cursor = polled.next_cursor;
  stats_.records += polled.records.size();
  stats_.lost_records += polled.lost;
  std::vector<NcclCallRecord> calls;
  calls.reserve(polled.records.size());
  for (const NcclRecord& rec : polled.records) {
    if (rec.op == nccl_ring::kOpHostExit) {
      r.inside_call = false;
    } else if (rec.op != nccl_ring::kOpDeviceTime) {
      r.inside_call = (rec.flags & nccl_ring::kFlagProfiled) != 0;
    }
    if (std::optional<NcclCallRecord> call = CallRecordOf(rec)) {
      calls.push_back(*call);
      const bool p2p = rec.op == nccl_ring::kOpSend || rec.op == nccl_ring::kOpRecv;
      const uint64_t match_sequence =
          p2p ? r.p2p_seen[{rec.comm_id, rec.op, rec.peer}]++ : r.collectives_seen[rec.comm_id]++;
      if (profiling_ && rec.comm_id != 0) {
        CommWindow& w = r.windows[rec.comm_id];
        w.rank_in_comm = rec.rank;
        w.comm_size = rec.nranks;
        Collective& col = w.collectives[rec.call_index];
        col = Collective{};
        col.op = rec.op;
        col.enter_ns = static_cast<int64_t>(rec.time_ns);
        col.bytes = rec.count * DataTypeBytes(rec.datatype);
        col.peer = p2p ? rec.peer : -1;
        col.match_sequence = match_sequence;
        while (w.collectives.size() > options_.profile_window) w.collectives.erase(w.collectives.begin());
        const CallRef ref{rec.comm_id, rec.call_index};
        r.pending[rec.seq] = ref;
        while (r.pending.size() > kMaxPendingCalls) r.pending.erase(r.pending.begin());
        if ((rec.flags & nccl_ring::kFlagInGroup) != 0 && r.open_group.size() < kMaxPendingCalls) {
          r.open_group.push_back(ref);
        }
      }
      continue;
    }
    if (!profiling_) continue;
    if (rec.op == nccl_ring::kOpGroupEnd || rec.op == nccl_ring::kOpGroupSimulateEnd) {
      // value = group depth at entry: 1 closes the outermost group. A simulated end
      // launched nothing: its operations never complete.
      if (rec.value <= 1) {
        if (rec.op == nccl_ring::kOpGroupEnd && !r.open_group.empty()) {
          r.groups[rec.seq] = std::move(r.open_group);
          while (r.groups.size() > kMaxPendingCalls) r.groups.erase(r.groups.begin());
        }
        r.open_group.clear();
      }
      continue;
    }
    if (rec.op != nccl_ring::kOpHostExit && rec.op != nccl_ring::kOpDeviceTime) continue;
    const bool device = rec.op == nccl_ring::kOpDeviceTime;
    const int64_t duration = static_cast<int64_t>(rec.value);
    if (auto p = r.pending.find(rec.call_seq); p != r.pending.end()) {
      AttachDuration(r, p->second, duration, device ? DurationSource::kDevice : DurationSource::kHostCall);
    } else if (auto g = r.groups.find(rec.call_seq); g != r.groups.end()) {
      for (const CallRef& ref : g->second) {
        AttachDuration(r, ref, duration, device ? DurationSource::kDevice : DurationSource::kHostGroup);
      }
    }
  }
  // Profile times are converted to Unix time when sent, with the latest offset.
  last_offset_ns_ = offset;
  if (calls.empty()) return;
  std::vector<IterationSample> samples = r.tracker->Add(calls);
  for (const IterationSample& s : samples) {
    const double seconds = static_cast<double>(s.duration_ns) / 1e9;
    ++r.iterations;
    ++stats_.iterations;
    r.last_iteration_seconds = seconds;
    if (s.pattern_epoch != r.pattern_epoch) {
      // A new period (a reconfiguration, a new model phase): its iterations are not
      // comparable with the old ones, so the series starts over: a new warm-up and a new
      // detector whose baseline is the new level. An open slowdown cannot be followed
      // into the new series; it is closed here (at the new series' start) so the
      // controller does not wait for an end that would never come.
      r.pattern_epoch = s.pattern_epoch;
      auto fresh = IterationWarmup::Create(options_.warmup);  // options validated in Create
      if (fresh.ok()) r.warmup.emplace(std::move(*fresh));
      const bool was_slow = r.detector->in_slowdown();
      auto detector = FailSlowDetector::Create(options_.detector);
      if (detector.ok()) r.detector.emplace(std::move(*detector));
      r.sample_starts.clear();
      r.first_sample_index = 0;
      ++stats_.series_restarts;
      if (was_slow && r.global_rank >= 0) {
        v1::FailSlowEvent w;
        w.set_global_rank(static_cast<uint32_t>(r.global_rank));
        w.set_kind(v1::FailSlowEvent::KIND_SLOWDOWN_END);
        w.set_onset_time(s.start_ns + offset);
        out.push_back(std::move(w));
      }
    }
    if (!r.warmup->Accept(seconds)) {
      ++stats_.warmup_iterations;
      continue;
    }
    r.sample_starts.push_back(s.start_ns);
    while (r.sample_starts.size() > kMaxSampleStarts) {
      r.sample_starts.pop_front();
      ++r.first_sample_index;
    }
    FailSlowUpdate update = r.detector->Update(seconds);
    for (const FailSlowEvent& e : update.events) {
      if (r.global_rank < 0) {
        // A process without RANK cannot be named; reporting it as rank 0 would blame
        // rank 0. Counted instead.
        ++stats_.unranked_events;
        continue;
      }
      v1::FailSlowEvent w;
      w.set_global_rank(static_cast<uint32_t>(r.global_rank));
      w.set_kind(ToWire(e.kind));
      const int64_t at = e.index - r.first_sample_index;
      const int64_t start = at >= 0 && at < static_cast<int64_t>(r.sample_starts.size())
                                ? r.sample_starts[static_cast<size_t>(at)]
                                : s.start_ns;
      w.set_onset_time(start + offset);
      w.set_before_seconds(e.mean_before);
      w.set_after_seconds(e.mean_after);
      w.set_severity(e.severity);
      w.set_iteration_index(static_cast<uint64_t>(e.index));
      out.push_back(std::move(w));
    }
  }
}

void FailSlowMonitor::AttachDuration(Ring& r, const CallRef& call, int64_t duration_ns,
                                     DurationSource source) const {
  auto w = r.windows.find(call.comm_id);
  if (w == r.windows.end()) return;
  auto c = w->second.collectives.find(call.call_index);
  if (c == w->second.collectives.end() || c->second.source > source) return;
  c->second.duration_ns = duration_ns;
  c->second.source = source;
}

void FailSlowMonitor::FillCommProfiles(google::protobuf::RepeatedPtrField<v1::CommProfile>* out) const {
  if (!profiling_) return;
  for (const auto& [path, r] : rings_) {
    if (r->global_rank < 0) continue;  // cannot be placed in the layout (no RANK)
    for (const auto& [comm_id, w] : r->windows) {
      v1::CommProfile* p = out->Add();
      p->set_comm_id(comm_id);
      p->set_rank_in_comm(static_cast<uint32_t>(std::max(w.rank_in_comm, 0)));
      p->set_comm_size(static_cast<uint32_t>(std::max(w.comm_size, 0)));
      p->set_global_rank(static_cast<uint32_t>(r->global_rank));
      for (const auto& [call_index, c] : w.collectives) {
        if (c.duration_ns < 0) continue;  // not completed yet
        v1::CollectiveTiming* t = p->add_collectives();
        t->set_sequence(c.match_sequence);
        t->set_peer(c.peer);
        t->set_op(OpName(c.op));
        t->set_enter_time(c.enter_ns + last_offset_ns_);
        t->set_exit_time(c.enter_ns + c.duration_ns + last_offset_ns_);
        t->set_bytes(c.bytes);
      }
    }
  }
}

std::vector<RankTrackingState> FailSlowMonitor::Ranks() const {
  std::vector<RankTrackingState> out;
  for (const auto& [path, r] : rings_) {
    RankTrackingState s;
    s.global_rank = r->global_rank;
    s.period = r->tracker ? r->tracker->period() : 0;
    s.iterations = r->iterations;
    s.last_iteration_seconds = r->last_iteration_seconds;
    s.warming_up = r->warmup ? !r->warmup->done() : true;
    s.in_slowdown = r->detector ? r->detector->in_slowdown() : false;
    out.push_back(s);
  }
  return out;
}

}  // namespace peregrine
