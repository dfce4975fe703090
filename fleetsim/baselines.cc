// The requeue baseline and the oracle as event replays.
//
// Both walk the same time line: the edges of the fault events (ends before starts at the
// same instant, so a machine repaired at t can fail again at t), the returns of repaired
// machines (end + machine_return_s) and, for the requeue baseline, the end of the job's
// current phase. Between two consecutive instants the job's state is constant, so the time
// in between is charged in one piece to the state's cause (Advance). At one instant the
// order is: phase end, machine return, fault edge. Each step is O(log n) in the sets below
// (free machines, slowed machines, pending returns), so a run is
// O((faults + checkpoints) log faults).
//
// Requeue baseline phases: training -> saving (disk checkpoint, training blocked) ->
// training ...; a fail-stop on a machine of the job (or, while training, a crash that
// leaves its machine up) -> detecting (failstop_detection_s from the fault) -> the
// machines still down are evicted and replaced by the lowest-numbered free machines that
// are up (the common practice does not look for slowness); if too few are free -> waiting
// until repairs return enough -> requeueing (requeue_s) -> restoring (disk_restore_s) ->
// training. A fail-stop on a machine of the job during any recovery phase starts detection
// again from that fault (the detection under way is not cut short), because the requeued
// job would crash on it; the time already spent keeps its cause. A crash without downtime
// during a recovery is ignored (no training process is running). The crash moves the
// progress since the last completed save from kept to redo; a crash during a save loses
// the save. Checkpoint intervals count wall seconds of training (slowed time included)
// since the last save or restore.
// Counts: a fault is counted when it starts on a machine the job holds and that is up;
// one recovery per episode (from its first fault to training again, faults that arrive
// during it join it); one restart per requeue begun; standby_exhaustions = recoveries that
// found too few free machines and waited.
//
// Oracle: the job holds the shape.machines() best machines at every instant (up, then
// least slowed); a machine that stops or is beaten by a free one is swapped at once
// (evictions count these swaps). It runs at the speed of its slowest held machine and
// waits while fewer machines than the job needs are up. No checkpoints, no detection, no
// restart, no redo. A recovery episode opens when a fail-stop takes a held machine and
// closes when the job holds enough machines again (0 s when a free machine was there).
#include "fleetsim/baselines.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <queue>
#include <set>
#include <utility>
#include <vector>

namespace peregrine::fleetsim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double Seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

// Local, so the baselines do not depend on the fault model's translation unit.
bool IsSlow(FaultKind kind) {
  return kind == FaultKind::kSlowCompute || kind == FaultKind::kSlowLink;
}

struct FaultEdge {
  double t = 0;
  int order = 0;  // 0: the event ends, 1: it starts
  int index = 0;  // into the fault list
};

// A fail-stop that takes its machine down; one with end_ns <= start_ns only crashes the
// training processes (a software fault with no repair) and the machine stays up.
bool TakesMachineDown(const FaultEvent& f) { return !IsSlow(f.kind) && f.end_ns > f.start_ns; }

// The edges of the events that fall in the cluster and start within [0, wall), in time
// order. A crash without downtime has no end edge; a fail-slow of no length is dropped.
std::vector<FaultEdge> SortedEdges(const std::vector<FaultEvent>& faults, int cluster,
                                   double wall) {
  std::vector<FaultEdge> edges;
  edges.reserve(faults.size() * 2);
  for (int i = 0; i < static_cast<int>(faults.size()); ++i) {
    const FaultEvent& f = faults[i];
    if (f.machine < 0 || f.machine >= cluster) continue;
    const double start = Seconds(f.start_ns);
    if (start < 0 || start >= wall) continue;
    if (IsSlow(f.kind) && f.end_ns <= f.start_ns) continue;
    edges.push_back({start, 1, i});
    if (f.end_ns > f.start_ns) edges.push_back({Seconds(f.end_ns), 0, i});
  }
  std::sort(edges.begin(), edges.end(), [](const FaultEdge& a, const FaultEdge& b) {
    if (a.t != b.t) return a.t < b.t;
    if (a.order != b.order) return a.order < b.order;
    return a.index < b.index;
  });
  return edges;
}

// Each machine's hardware state: stopped or up, its active slowdowns, its pending return.
class MachineBook {
 public:
  MachineBook(int size, double return_s) : machines_(size), return_s_(return_s) {}

  bool up(int i) const { return machines_[i].up; }
  double severity(int i) const {
    const auto& slow = machines_[i].slow;
    return slow.empty() ? 0.0 : *slow.rbegin();
  }

  // A hardware fail-stop starts; true when the machine was up until now.
  bool StopStarts(int i) {
    Machine& m = machines_[i];
    ++m.stops;
    ++m.generation;  // a return already scheduled is void
    const bool was_up = m.up;
    m.up = false;
    return was_up;
  }
  // A fail-stop ends; the machine returns after machine_return_s unless another holds it.
  void StopEnds(int i, double t) {
    Machine& m = machines_[i];
    if (--m.stops == 0) returns_.push({t + return_s_, i, m.generation});
  }
  double NextReturn() const { return returns_.empty() ? kInf : returns_.top().t; }
  // The machine that is up again at NextReturn(), or -1 when that return was void.
  int PopReturn() {
    const Return r = returns_.top();
    returns_.pop();
    Machine& m = machines_[r.machine];
    if (m.generation != r.generation || m.stops != 0) return -1;
    m.up = true;
    return r.machine;
  }
  void SlowStarts(int i, double severity) { machines_[i].slow.insert(severity); }
  void SlowEnds(int i, double severity) {
    auto& slow = machines_[i].slow;
    auto it = slow.find(severity);
    if (it != slow.end()) slow.erase(it);
  }

 private:
  struct Machine {
    int stops = 0;
    bool up = true;
    uint64_t generation = 0;
    std::multiset<double> slow;
  };
  struct Return {
    double t;
    int machine;
    uint64_t generation;
    bool operator>(const Return& o) const {
      return t != o.t ? t > o.t : machine > o.machine;
    }
  };
  std::vector<Machine> machines_;
  double return_s_;
  std::priority_queue<Return, std::vector<Return>, std::greater<Return>> returns_;
};

void Finish(double wall, double kept, SimResult& result) {
  result.wall_s = wall;
  result.kept_s = kept;
  result.ettr = wall > 0 ? kept / wall : 0;
  // The job holds exactly its own machines (the spares are the cluster's, not the job's),
  // so kept GPU-seconds over held GPU-seconds equals ETTR.
  result.goodput = result.ettr;
}

class RequeueReplay {
 public:
  RequeueReplay(const std::vector<FaultEvent>& faults, const JobShape& shape,
                const CostModel& costs, int spares)
      : faults_(faults),
        costs_(costs),
        need_(std::max(0, shape.machines())),
        cluster_(need_ + std::max(0, spares)),
        wall_(std::max(0.0, shape.days * 86400.0)),
        book_(cluster_, costs.machine_return_s),
        assigned_(cluster_, false) {
    result_.policy = kRequeuePolicyName;
    for (int i = 0; i < cluster_; ++i) {
      if (i < need_) {
        Assign(i);
      } else {
        free_up_.insert(i);
      }
    }
  }

  SimResult Run() {
    const std::vector<FaultEdge> edges = SortedEdges(faults_, cluster_, wall_);
    size_t next = 0;
    while (true) {
      const double te = next < edges.size() ? edges[next].t : kInf;
      const double tr = book_.NextReturn();
      const double tp = PhaseEnd();
      const double t = std::min({te, tr, tp, wall_});
      Advance(t);
      if (t >= wall_) break;
      if (tp <= t) {
        EndPhase();
      } else if (tr <= t) {
        const int machine = book_.PopReturn();
        if (machine >= 0) OnReturn(machine);
      } else {
        OnEdge(edges[next++]);
      }
    }
    Finish(wall_, progress_, result_);
    return result_;
  }

 private:
  enum class Phase { kTraining, kSaving, kDetecting, kWaiting, kRequeueing, kRestoring };

  double Slowdown() const { return assigned_slow_.empty() ? 0.0 : *assigned_slow_.rbegin(); }

  void Advance(double t) {
    const double dt = t - now_;
    if (dt <= 0) return;
    now_ = t;
    TimeLost& lost = result_.lost;
    switch (phase_) {
      case Phase::kTraining: {
        const double progress = dt / (1 + Slowdown());
        progress_ += progress;
        since_save_ += progress;
        lost.slowdown_s += dt - progress;
        run_since_save_ += dt;
        break;
      }
      case Phase::kSaving: lost.checkpoint_s += dt; break;
      case Phase::kDetecting: lost.detection_s += dt; break;
      case Phase::kWaiting: lost.waiting_s += dt; break;
      case Phase::kRequeueing:
      case Phase::kRestoring: lost.restart_s += dt; break;
    }
  }

  double PhaseEnd() const {
    switch (phase_) {
      case Phase::kTraining:
        if (costs_.disk_checkpoint_interval_s <= 0) return kInf;
        return now_ + std::max(0.0, costs_.disk_checkpoint_interval_s - run_since_save_);
      case Phase::kWaiting: return kInf;
      default: return phase_end_;
    }
  }

  void EndPhase() {
    switch (phase_) {
      case Phase::kTraining:
        Enter(Phase::kSaving, costs_.disk_checkpoint_save_s);
        break;
      case Phase::kSaving:  // the save is complete: what was trained is safe
        since_save_ = 0;
        run_since_save_ = 0;
        phase_ = Phase::kTraining;
        break;
      case Phase::kDetecting:
        for (int machine : assigned_down_) {
          Unassign(machine);
          ++result_.evictions;
        }
        assigned_down_.clear();
        Refill();
        if (assigned_count_ < need_) {
          ++result_.standby_exhaustions;
          phase_ = Phase::kWaiting;
        } else {
          StartRequeue();
        }
        break;
      case Phase::kRequeueing:
        Enter(Phase::kRestoring, costs_.disk_restore_s);
        break;
      case Phase::kRestoring:
        ++result_.recoveries;
        result_.recovery_s += now_ - episode_start_;
        run_since_save_ = 0;
        phase_ = Phase::kTraining;
        break;
      case Phase::kWaiting:
        break;
    }
  }

  void Enter(Phase phase, double duration) {
    phase_ = phase;
    phase_end_ = now_ + std::max(0.0, duration);
  }

  void StartRequeue() {
    ++result_.restarts;
    Enter(Phase::kRequeueing, costs_.requeue_s);
  }

  void Refill() {
    while (assigned_count_ < need_ && !free_up_.empty()) {
      const int machine = *free_up_.begin();
      free_up_.erase(free_up_.begin());
      Assign(machine);
    }
  }

  // A fault stopped the job (or its recovery) at now_.
  void JobHit() {
    const double detected = now_ + costs_.failstop_detection_s;
    switch (phase_) {
      case Phase::kTraining:
      case Phase::kSaving:
        result_.lost.redo_s += since_save_;
        progress_ -= since_save_;
        since_save_ = 0;
        episode_start_ = now_;
        Enter(Phase::kDetecting, costs_.failstop_detection_s);
        break;
      case Phase::kDetecting:
        phase_end_ = std::max(phase_end_, detected);
        break;
      default:
        Enter(Phase::kDetecting, costs_.failstop_detection_s);
        break;
    }
  }

  void OnReturn(int machine) {
    if (assigned_[machine]) {  // repaired before detection evicted it: it stays
      assigned_down_.erase(machine);
      return;
    }
    free_up_.insert(machine);
    if (phase_ == Phase::kWaiting) {
      Refill();
      if (assigned_count_ == need_) StartRequeue();
    }
  }

  void OnEdge(const FaultEdge& edge) {
    const FaultEvent& f = faults_[edge.index];
    const int machine = f.machine;
    const bool starts = edge.order == 1;
    if (IsSlow(f.kind)) {
      const double before = book_.severity(machine);
      if (starts) {
        book_.SlowStarts(machine, f.severity);
      } else {
        book_.SlowEnds(machine, f.severity);
      }
      if (assigned_[machine]) {
        ReplaceSeverity(before, book_.severity(machine));
        if (starts && book_.up(machine)) {
          ++result_.faults;
          ++result_.fail_slows;
        }
      }
      return;
    }
    if (!TakesMachineDown(f)) {
      const bool training = phase_ == Phase::kTraining || phase_ == Phase::kSaving;
      if (assigned_[machine] && book_.up(machine) && training) {
        ++result_.faults;
        ++result_.fail_stops;
        JobHit();
      }
      return;
    }
    if (!starts) {
      book_.StopEnds(machine, now_);
      return;
    }
    if (!book_.StopStarts(machine)) return;  // already down: nothing changes
    if (!assigned_[machine]) {
      free_up_.erase(machine);
      return;
    }
    ++result_.faults;
    ++result_.fail_stops;
    assigned_down_.insert(machine);
    JobHit();
  }

  void Assign(int machine) {
    assigned_[machine] = true;
    ++assigned_count_;
    ReplaceSeverity(0, book_.severity(machine));
  }
  void Unassign(int machine) {
    assigned_[machine] = false;
    --assigned_count_;
    ReplaceSeverity(book_.severity(machine), 0);
  }
  void ReplaceSeverity(double before, double after) {
    if (before == after) return;
    if (before > 0) assigned_slow_.erase(assigned_slow_.find(before));
    if (after > 0) assigned_slow_.insert(after);
  }

  const std::vector<FaultEvent>& faults_;
  const CostModel& costs_;
  const int need_;
  const int cluster_;
  const double wall_;
  MachineBook book_;
  std::vector<bool> assigned_;
  int assigned_count_ = 0;
  std::set<int> free_up_;
  std::set<int> assigned_down_;
  std::multiset<double> assigned_slow_;

  Phase phase_ = Phase::kTraining;
  double phase_end_ = 0;
  double now_ = 0;
  double progress_ = 0;        // kept training, in healthy-job seconds
  double since_save_ = 0;      // ... of which not yet in a completed save
  double run_since_save_ = 0;  // wall seconds trained since the last save or restore
  double episode_start_ = 0;
  SimResult result_;
};

class OracleReplay {
 public:
  OracleReplay(const std::vector<FaultEvent>& faults, const JobShape& shape,
               const CostModel& costs, int spares)
      : faults_(faults),
        need_(std::max(0, shape.machines())),
        cluster_(need_ + std::max(0, spares)),
        wall_(std::max(0.0, shape.days * 86400.0)),
        book_(cluster_, costs.machine_return_s),
        assigned_(cluster_, false) {
    result_.policy = kOraclePolicyName;
    for (int i = 0; i < cluster_; ++i) free_healthy_.insert(i);
    Rebalance();
  }

  SimResult Run() {
    const std::vector<FaultEdge> edges = SortedEdges(faults_, cluster_, wall_);
    size_t next = 0;
    while (true) {
      const double te = next < edges.size() ? edges[next].t : kInf;
      const double tr = book_.NextReturn();
      const double t = std::min({te, tr, wall_});
      Advance(t);
      if (t >= wall_) break;
      if (tr <= t) {
        const int machine = book_.PopReturn();
        if (machine >= 0) InsertFree(machine);
      } else {
        OnEdge(edges[next++]);
      }
      // Rebalance once all that happens at this instant is known: no swap back and forth.
      const double next_t = std::min(next < edges.size() ? edges[next].t : kInf,
                                     book_.NextReturn());
      if (next_t > t) Rebalance();
    }
    Finish(wall_, kept_, result_);
    return result_;
  }

 private:
  using Slowed = std::pair<double, int>;  // (severity, machine)

  void Advance(double t) {
    const double dt = t - now_;
    if (dt <= 0) return;
    now_ = t;
    if (assigned_count_ < need_) {
      result_.lost.waiting_s += dt;
      return;
    }
    const double slow = assigned_slow_.empty() ? 0.0 : assigned_slow_.rbegin()->first;
    const double progress = dt / (1 + slow);
    kept_ += progress;
    result_.lost.slowdown_s += dt - progress;
  }

  void OnEdge(const FaultEdge& edge) {
    const FaultEvent& f = faults_[edge.index];
    const int machine = f.machine;
    const bool starts = edge.order == 1;
    if (IsSlow(f.kind)) {
      const bool up = book_.up(machine);
      if (up) RemoveFromSets(machine);
      if (starts) {
        book_.SlowStarts(machine, f.severity);
      } else {
        book_.SlowEnds(machine, f.severity);
      }
      if (!up) return;
      if (assigned_[machine]) {
        if (book_.severity(machine) > 0) assigned_slow_.insert({book_.severity(machine), machine});
        if (starts) {
          ++result_.faults;
          ++result_.fail_slows;
        }
      } else {
        InsertFree(machine);
      }
      return;
    }
    if (!TakesMachineDown(f)) {
      if (assigned_[machine] && book_.up(machine) && assigned_count_ == need_) {
        ++result_.faults;
        ++result_.fail_stops;
        ++result_.recoveries;  // restarted for free, at once
      }
      return;
    }
    if (!starts) {
      book_.StopEnds(machine, now_);
      return;
    }
    if (!book_.StopStarts(machine)) return;
    if (!assigned_[machine]) {
      RemoveFromSets(machine);
      return;
    }
    ++result_.faults;
    ++result_.fail_stops;
    RemoveFromSets(machine);
    assigned_[machine] = false;
    --assigned_count_;
    ++result_.evictions;
    if (!in_episode_) {
      in_episode_ = true;
      episode_start_ = now_;
    }
  }

  // Removes an up machine from whichever set holds it (it stays assigned if it was).
  void RemoveFromSets(int machine) {
    const double s = book_.severity(machine);
    if (assigned_[machine]) {
      if (s > 0) assigned_slow_.erase({s, machine});
    } else if (s > 0) {
      free_slow_.erase({s, machine});
    } else {
      free_healthy_.erase(machine);
    }
  }

  void InsertFree(int machine) {
    const double s = book_.severity(machine);
    if (s > 0) {
      free_slow_.insert({s, machine});
    } else {
      free_healthy_.insert(machine);
    }
  }

  // The best free machine, taken out of the free sets; -1 when none is up.
  int TakeBestFree() {
    if (!free_healthy_.empty()) {
      const int machine = *free_healthy_.begin();
      free_healthy_.erase(free_healthy_.begin());
      return machine;
    }
    if (!free_slow_.empty()) {
      const int machine = free_slow_.begin()->second;
      free_slow_.erase(free_slow_.begin());
      return machine;
    }
    return -1;
  }

  void Assign(int machine) {
    assigned_[machine] = true;
    ++assigned_count_;
    const double s = book_.severity(machine);
    if (s > 0) assigned_slow_.insert({s, machine});
  }

  // Restores the invariant: the job holds min(need, up) machines and no free machine is
  // less slowed than its slowest one.
  void Rebalance() {
    while (assigned_count_ < need_) {
      const int machine = TakeBestFree();
      if (machine < 0) break;
      Assign(machine);
    }
    while (!assigned_slow_.empty()) {
      const Slowed worst = *assigned_slow_.rbegin();
      const bool better = !free_healthy_.empty() ||
                          (!free_slow_.empty() && free_slow_.begin()->first < worst.first);
      if (!better) break;
      assigned_slow_.erase(worst);
      assigned_[worst.second] = false;
      --assigned_count_;
      ++result_.evictions;
      Assign(TakeBestFree());
      InsertFree(worst.second);
    }
    if (in_episode_ && assigned_count_ == need_) {
      in_episode_ = false;
      ++result_.recoveries;
      result_.recovery_s += now_ - episode_start_;
    }
  }

  const std::vector<FaultEvent>& faults_;
  const int need_;
  const int cluster_;
  const double wall_;
  MachineBook book_;
  std::vector<bool> assigned_;
  int assigned_count_ = 0;
  std::set<int> free_healthy_;
  std::set<Slowed> free_slow_;
  std::set<Slowed> assigned_slow_;
  bool in_episode_ = false;
  double episode_start_ = 0;
  double now_ = 0;
  double kept_ = 0;
  SimResult result_;
};

}  // namespace

SimResult RunRequeueBaseline(const std::vector<FaultEvent>& faults, const JobShape& shape,
                             const CostModel& costs, int spare_machines) {
  return RequeueReplay(faults, shape, costs, spare_machines).Run();
}

SimResult RunOracle(const std::vector<FaultEvent>& faults, const JobShape& shape,
                    const CostModel& costs, int spare_machines) {
  return OracleReplay(faults, shape, costs, spare_machines).Run();
}

}  // namespace peregrine::fleetsim
