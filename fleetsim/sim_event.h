// The simulator's clock and event queue: simulated time in nanoseconds since the job's
// start, and a queue of timed events popped in (time, insertion order) so that a run is
// deterministic. The decision core sees Unix nanoseconds: SimToUnix adds a fixed epoch
// (the core treats 0 as "unset").
// Plain values and a single-threaded queue. Thread-compatible.
#ifndef PEREGRINE_FLEETSIM_SIM_EVENT_H_
#define PEREGRINE_FLEETSIM_SIM_EVENT_H_

#include <cmath>
#include <cstdint>
#include <queue>
#include <vector>

namespace peregrine::fleetsim {

inline constexpr int64_t kSimNanosPerSecond = 1'000'000'000;
// Unix time of simulated time 0 (2024-01-01T00:00:00Z).
inline constexpr int64_t kSimEpochUnixNs = 1'704'067'200LL * kSimNanosPerSecond;

inline int64_t SecondsToNs(double s) { return static_cast<int64_t>(std::llround(s * 1e9)); }
inline double NsToSeconds(int64_t ns) { return static_cast<double>(ns) / 1e9; }
inline int64_t SimToUnix(int64_t sim_ns) { return kSimEpochUnixNs + sim_ns; }

enum class SimEventKind {
  kFaultStart,     // a: fault index
  kFaultDetected,  // a: fault index, b: pod uid hit at the fault's start
  kFaultEnd,       // a: fault index
  kPodReady,       // a: pod uid
  kAgentReady,     // a: pod uid, b: the attempt it converged to
  kCommandDone,    // a: pod uid, b: index of the command in the cluster's command table
  kFirstStep,      // b: the attempt whose first step completed
  kMachineReturn,  // a: machine index
  kSlowCheck,      // wakes the engine when a change of the iteration time is verified
};

struct SimEvent {
  int64_t at = 0;
  uint64_t seq = 0;
  SimEventKind kind = SimEventKind::kFaultStart;
  int64_t a = 0;
  int64_t b = 0;
};

class EventQueue {
 public:
  void Push(int64_t at, SimEventKind kind, int64_t a = 0, int64_t b = 0) {
    heap_.push(SimEvent{at, seq_++, kind, a, b});
  }
  bool Empty() const { return heap_.empty(); }
  int64_t NextAt() const { return heap_.top().at; }
  SimEvent Pop() {
    SimEvent e = heap_.top();
    heap_.pop();
    return e;
  }
  size_t size() const { return heap_.size(); }

 private:
  struct Later {
    bool operator()(const SimEvent& x, const SimEvent& y) const {
      return x.at != y.at ? x.at > y.at : x.seq > y.seq;
    }
  };
  std::priority_queue<SimEvent, std::vector<SimEvent>, Later> heap_;
  uint64_t seq_ = 0;
};

}  // namespace peregrine::fleetsim

#endif  // PEREGRINE_FLEETSIM_SIM_EVENT_H_
