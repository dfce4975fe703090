// FailSlowMonitor: the agent's fail-slow tracking (Falcon-Detect, agent side).
//
// The training processes run with libperegrine_nccl.so preloaded (AddNcclHookEnvironment),
// each writing its NCCL calls into a ring file in `ring_dir`. Poll() reads every ring:
// per process it infers iteration times (IterationTracker) and, past the warm-up
// (IterationWarmup below), feeds each rank's FailSlowDetector; verified changes come back
// as peregrine.v1.FailSlowEvent with onsets in Unix nanoseconds. While profiling is on
// (SetMode), FillCommProfiles() reports per-collective durations (only durations are
// comparable across hosts). Mode changes reach every open and later ring. Rings of exited
// processes are read once more and deleted. Details are described in failslow_monitor.cc.
//
// Cost: Poll() is O(new records) plus one directory listing; call it at ~100 ms or at the
// heartbeat cadence, never per call. Ring files are opened once and kept mapped.
//
// Thread-compatible: one owner (the agent's control loop) calls every method. The monitor
// owns its ring mappings; it never touches the training processes themselves.
#ifndef PEREGRINE_AGENT_FAILSLOW_MONITOR_H_
#define PEREGRINE_AGENT_FAILSLOW_MONITOR_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/nccl_ring/ring_reader.h"
#include "diagnosis/change_point.h"
#include "diagnosis/iteration_period.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "peregrine/v1/failslow.pb.h"

namespace peregrine {

// Adds the hook's environment to a training process's "KEY=VALUE" list: LD_PRELOAD gets
// `hook_path` prepended (an existing LD_PRELOAD is kept after it), PEREGRINE_NCCL_RING_DIR
// is set to `ring_dir`, and PEREGRINE_NCCL_PROFILING=1 / PEREGRINE_NCCL_TRAP=1 when the
// process must start in that mode. An empty hook_path leaves `env` unchanged.
void AddNcclHookEnvironment(const std::string& hook_path, const std::string& ring_dir, bool profiling,
                            bool trap, std::vector<std::string>* env);

// Warm-up rule (robust to a warm-up phase). The first iterations of a series
// are not representative: process start-up (allocations, first connections), the other
// ranks of a restarted job still starting on the same (loaded) machine, a period detected
// on calls buffered during start-up. A series starts when a training process starts (its
// ring opens: a new attempt, a restart in place, a standby activation), on Reset(), and
// when the iteration tracker detects a new period (pattern_epoch changes; the detector
// restarts too, so a reconfiguration that lengthens iterations is a new baseline, not a
// fail-slow, and an open slowdown is closed with a SLOWDOWN_END). Its samples
// are dropped until:
//  - at least min_iterations (default 20) have been dropped, and
//  - the level has settled: the median of the last `window` (8) dropped samples is within
//    stable_fraction (5%, half of Falcon's 10% verification threshold) of the median of
//    the `window` samples before them;
//  - or max_iterations (100) have been dropped, so that a rank that never settles (heavy
//    jitter) is still tracked.
// The first accepted sample is the one that arrives once those hold. The detector then
// calibrates on the accepted samples only, so its healthy level is the settled one.
struct WarmupOptions {
  int min_iterations = 20;
  int window = 8;
  double stable_fraction = 0.05;
  int max_iterations = 100;
};

// The warm-up rule for one series. Pure: no clocks; thread-compatible value type.
class IterationWarmup {
 public:
  // kInvalidArgument naming the field: min_iterations < 2 * window (the settling check
  // needs two full windows), window < 1, stable_fraction <= 0, max_iterations <
  // min_iterations.
  static absl::StatusOr<IterationWarmup> Create(const WarmupOptions& options);

  // One iteration time of the series (any unit). True: past warm-up, feed it to the
  // detector; false: dropped as warm-up. Non-finite or non-positive samples are dropped
  // while warming up and do not count.
  bool Accept(double seconds);

  bool done() const { return done_; }
  int dropped() const { return dropped_; }

 private:
  explicit IterationWarmup(const WarmupOptions& options) : options_(options) {}
  bool Settled() const;

  WarmupOptions options_;
  std::deque<double> recent_;  // the last 2 * window dropped samples
  int dropped_ = 0;
  bool done_ = false;
};

// Deletes the private ring directories "<parent>/peregrine-nccl-<name>-<agent pid>" of
// agents that no longer run (an agent killed before its monitor was destroyed). Returns
// how many were deleted; directories of live agents and other names are left alone.
int RemoveDeadAgentRingDirs(const std::string& parent);

struct FailSlowMonitorOptions {
  std::string ring_dir;  // where the training processes' rings are (created if missing)
  // Delete ring_dir and everything the hooks left in it when the monitor is destroyed
  // (a private directory, e.g. under /dev/shm). Processes still running keep their
  // mappings: unlinking a mapped file does not disturb them.
  bool remove_ring_dir_on_exit = false;
  IterationTrackerOptions tracker;
  WarmupOptions warmup;
  FailSlowDetectorOptions detector;
  size_t profile_window = 64;       // recent collectives kept per communicator
  size_t max_records_per_poll = 65536;
};

struct FailSlowMonitorStats {
  uint64_t rings_opened = 0;
  uint64_t rings_removed = 0;
  uint64_t records = 0;
  uint64_t lost_records = 0;
  uint64_t iterations = 0;
  uint64_t warmup_iterations = 0;  // dropped by the warm-up rule (in `iterations` too)
  uint64_t events = 0;
  uint64_t ring_failures = 0;      // processes that run without a ring (see TakeRingFailures)
  uint64_t series_restarts = 0;    // a new period was detected: warm-up and detector restarted
  uint64_t unranked_events = 0;    // changes of processes without RANK, not reported

};

// A rank's tracking state, for status and tests.
struct RankTrackingState {
  int global_rank = -1;
  int period = 0;                  // calls per iteration, 0 while unknown
  uint64_t iterations = 0;
  double last_iteration_seconds = 0;
  bool warming_up = true;          // the current series is still in its warm-up
  bool in_slowdown = false;
};

class FailSlowMonitor {
 public:
  // kInvalidArgument for tracker/warm-up/detector options out of range; kInternal when
  // ring_dir cannot be created.
  static absl::StatusOr<std::unique_ptr<FailSlowMonitor>> Create(FailSlowMonitorOptions options);
  ~FailSlowMonitor();

  // Reads every ring; returns the verified changes found since the last call, in order.
  // A process without RANK (global rank -1) is tracked (Ranks()) but its changes and
  // profiles are not reported: it cannot be named (stats().unranked_events counts them).
  // `unix_now_ns` and `monotonic_now_ns` are read together by the caller and convert the
  // hook's CLOCK_MONOTONIC times to Unix time.
  std::vector<v1::FailSlowEvent> Poll(int64_t unix_now_ns, int64_t monotonic_now_ns);

  // Forgets every rank's tracking (a new attempt starts): rings of live processes stay
  // open but their series restart, warm-up included.
  void Reset();

  // Replaces the detector settings (the job's spec.failSlow, from the assignment) and
  // restarts every rank's series as Reset() does, so each rank gets a new detector built
  // with them (a detector is never reconfigured in place: its calibration and pending
  // change points belong to the old settings). kInvalidArgument, naming the field, for
  // settings out of range (nothing changes then).
  absl::Status SetDetectorOptions(const FailSlowDetectorOptions& detector);
  const FailSlowDetectorOptions& detector_options() const { return options_.detector; }

  // Switches profiling / trap in every ring, now and for rings opened later. Turning
  // profiling on clears the profile windows, so profiles only hold calls made under it.
  void SetMode(bool profiling, bool trap);
  bool profiling() const { return profiling_; }
  bool trap() const { return trap_; }

  // Appends one CommProfile per (rank, communicator) with its recent collectives. Nothing
  // while profiling is off.
  void FillCommProfiles(google::protobuf::RepeatedPtrField<v1::CommProfile>* out) const;

  // Whether trap mode has really paused training, judged on the rings as of the last
  // Poll(). A ring is paused when its write index has not moved since the previous
  // CheckPaused() call and either a thread waits in its trap, or (profiling on) its
  // last call has entered NCCL without returning: blocked inside a collective whose peer
  // is trapped (host-blocking NCCL, e.g. sim/'s; a real GPU's launches return, so that
  // thread reaches the trap at its next call). Call it after Poll() at a steady cadence;
  // the first call after SetMode(trap) never reports paused (nothing to compare yet).
  struct PauseCheck {
    bool paused = false;  // every live ring paused (also true with no ring at all)
    int rings = 0;
    std::string waiting_for;  // when not paused: which ranks and why, for an error
  };
  PauseCheck CheckPaused();

  // Processes whose hook could not create its ring (full or size-limited file system,
  // ...) and forward NCCL calls unrecorded, first seen by a Poll since the last call;
  // each is returned once. Their markers are deleted once the process has exited.
  std::vector<NcclRingFailure> TakeRingFailures();

  std::vector<RankTrackingState> Ranks() const;
  const FailSlowMonitorStats& stats() const { return stats_; }
  const std::string& ring_dir() const { return options_.ring_dir; }

 private:
  // Where a collective's duration came from, weakest first: a later, stronger source
  // replaces an earlier one whatever order the records arrive in.
  enum class DurationSource : uint8_t { kNone = 0, kHostCall = 1, kHostGroup = 2, kDevice = 3 };
  struct Collective {
    uint8_t op = 0;
    int64_t enter_ns = 0;      // monotonic, this host's clock
    int64_t duration_ns = -1;  // -1 until a completion record arrived
    DurationSource source = DurationSource::kNone;
    uint64_t bytes = 0;
    int peer = -1;
    uint64_t match_sequence = 0;  // equal on every member (see CollectiveTiming.sequence)
  };
  struct CommWindow {
    int rank_in_comm = -1;
    int comm_size = -1;
    std::map<uint64_t, Collective> collectives;  // by per-communicator call number
  };
  struct CallRef {
    uint64_t comm_id = 0;
    uint64_t call_index = 0;
  };
  struct Ring;

  explicit FailSlowMonitor(FailSlowMonitorOptions options);
  absl::Status ResetRing(Ring& ring) const;
  void Consume(Ring& ring, int64_t unix_offset_ns, std::vector<v1::FailSlowEvent>& out);
  void AttachDuration(Ring& ring, const CallRef& call, int64_t duration_ns, DurationSource source) const;

  FailSlowMonitorOptions options_;
  bool profiling_ = false;
  bool trap_ = false;
  int64_t last_offset_ns_ = 0;  // Unix - monotonic at the last poll
  FailSlowMonitorStats stats_;
  std::map<std::string, std::unique_ptr<Ring>> rings_;  // by path
  std::map<std::string, bool> failures_seen_;            // marker path -> returned
  std::vector<NcclRingFailure> new_failures_;
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_FAILSLOW_MONITOR_H_
