#include "controller/kube/node_health_controller.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/fnv1a.h"
#include "controller/kube/json_fields.h"
#include "controller/kube/kube_cluster.h"
#include "controller/kube/pod_observer.h"
#include "controller/kube/resources.h"
#include "controller/node_health_inputs.h"

// How a step reaches the Node. ApplyLocked reads the Node from the API server (not the
// cache: a step must see the record its last write left), decodes the record, steps it
// and writes the new record and the cordon/taint changes in one merge patch that names
// the resourceVersion read, so a concurrent writer (kubectl, the node controller, another
// step) makes it fail with 409 and the step is redone on the fresh Node: no record change
// is lost and none is applied twice. The events follow the write (an event for a write
// that failed would be a lie). A kStartSweep action is carried out after the write and its
// outcome (started / could not start) is fed back as the next input, in the same call.
//
// Sweep Jobs: one per (node, attempt), named SweepJobName. backoffLimit 0 (a failed check
// is a verdict, not a flake to retry), activeDeadlineSeconds = the lifecycle's sweep
// timeout, ttlSecondsAfterFinished one day (kept for `kubectl logs`). The pod is placed by
// the scheduler with a required node affinity on metadata.name (as DaemonSet pods are), so
// an unschedulable sweep shows as PodScheduled=False and is reported, not silently stuck.
// It requests the Node's allocatable nvidia.com/gpu so the device plugin hands it every
// GPU; a GPU still held by another pod makes it unschedulable until that pod goes.

namespace peregrine {
namespace {

using nlohmann::json;
using kube::Path;
using kube::Str;

constexpr int kMaxConflictRetries = 5;
constexpr int kMaxInputsPerApply = 8;  // a step chain: start -> started, at most a few
constexpr int64_t kSweepJobTtlSeconds = 24 * 3600;
constexpr char kUnschedulableTaint[] = "node.kubernetes.io/unschedulable";

kube::ResourcePath JobsPath(const std::string& ns) { return kube::ResourcePath{"batch", "v1", "jobs", ns}; }

std::map<std::string, std::string> StringMap(const json& node, const char* field) {
  std::map<std::string, std::string> out;
  const json* m = Path(node, {"metadata", field});
  if (m == nullptr || !m->is_object()) return out;
  for (const auto& [k, v] : m->items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  return out;
}

bool Unschedulable(const json& node) {
  const json* u = Path(node, {"spec", "unschedulable"});
  return u != nullptr && u->is_boolean() && u->get<bool>();
}

bool IsQuarantineTaint(const json& t) {
  return t.is_object() && Str(t, "key") == kQuarantineTaintKey && Str(t, "effect") == kQuarantineTaintEffect;
}

json Taints(const json& node) {
  const json* t = Path(node, {"spec", "taints"});
  return t != nullptr && t->is_array() ? *t : json::array();
}

bool HasOurTaint(const json& node) {
  const json taints = Taints(node);
  return std::any_of(taints.begin(), taints.end(), IsQuarantineTaint);
}

int64_t AllocatableGpus(const json& node) {
  const json* g = Path(node, {"status", "allocatable", "nvidia.com/gpu"});
  if (g == nullptr) return 0;
  if (g->is_number_integer()) return g->get<int64_t>();
  if (g->is_string()) {
    int64_t n = 0;
    for (char c : g->get<std::string>()) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return 0;
      n = n * 10 + (c - '0');
      if (n > 1024) return 0;
    }
    return n;
  }
  return 0;
}

int64_t ParseTime(const json* t) {
  if (t == nullptr || !t->is_string()) return 0;
  absl::Time out;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, t->get<std::string>(), &out, &err)) return 0;
  return absl::ToUnixNanos(out);
}

// A Job's condition `type` with status True: its message (or the reason), else nullopt.
std::optional<std::string> JobCondition(const json& job, const char* type) {
  const json* conds = Path(job, {"status", "conditions"});
  if (conds == nullptr || !conds->is_array()) return std::nullopt;
  for (const json& c : *conds) {
    if (Str(c, "type") == type && Str(c, "status") == "True") {
      std::string m = Str(c, "message");
      return m.empty() ? Str(c, "reason") : m;
    }
  }
  return std::nullopt;
}

int64_t JobCount(const json& job, const char* field) {
  const json* v = Path(job, {"status", field});
  return v != nullptr && v->is_number_integer() ? v->get<int64_t>() : 0;
}

// Single-quotes `s` for sh.
std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

std::string SweepJobName(const std::string& node, int attempt) {
  std::string base;
  for (char c : node) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    base += std::isalnum(static_cast<unsigned char>(l)) ? l : '-';
  }
  const std::string tail = absl::StrFormat("-%08x-%d", static_cast<uint32_t>(Fnv1a(node)), attempt);
  const size_t room = 63 - std::string("pg-sweep-").size() - tail.size();
  base = base.substr(0, room);
  while (!base.empty() && base.back() == '-') base.pop_back();
  return absl::StrCat("pg-sweep-", base.empty() ? "node" : base, tail);
}

std::string SweepScript(const std::string& diagnose_path, SweepKind kind, int64_t gpus) {
  // Each check prints peregrine-diagnose's output; its last line must be a result whose
  // kind is followed by "passed: true" (proto3 text leaves a false `passed` out).
  std::string script = "fail=0\n";
  for (const SweepCheck& check : SweepChecks(kind)) {
    std::string args = absl::StrCat(ShellQuote(diagnose_path), " --kind ", check.kind,
                                    " --machine-id \"$PEREGRINE_MACHINE_ID\"");
    if (gpus > 0) absl::StrAppend(&args, " --gpus ", gpus);
    for (const auto& [k, v] : check.params) absl::StrAppend(&args, " --param ", ShellQuote(absl::StrCat(k, "=", v)));
    absl::StrAppend(&script, "out=$(", args, " 2>&1)\n", "printf '%s\\n' \"$out\"\n",
                    "last=$(printf '%s\\n' \"$out\" | tail -n 1)\n", "case \"$last\" in\n");
    // The pod holds the node's GPUs: a GEMM check that finds no CUDA device is a fault (a
    // lost GPU or driver), not an absent tool.
    if (check.kind == "gemm" && gpus > 0) {
      absl::StrAppend(&script, "  *' not_present: true'*) fail=1; echo \"sweep: gemm found no CUDA device on a node with ",
                      gpus, " GPU(s): $last\" ;;\n");
    }
    absl::StrAppend(&script,
                    "  'peregrine-diagnose: result kind: \"", check.kind, "\" passed: true'*) ;;\n",
                    "  *) fail=1; echo \"sweep: ", check.kind, " failed: $last\" ;;\n", "esac\n");
  }
  absl::StrAppend(&script, "exit $fail\n");
  return script;
}

json BuildSweepJob(const NodeHealthControllerOptions& options, const std::string& node, int attempt, SweepKind kind,
                   int64_t gpus) {
  const std::string name = SweepJobName(node, attempt);
  json container = {{"name", "sweep"},
                    {"image", options.sweep_image},
                    {"command", {"/bin/sh", "-c", SweepScript(options.diagnose_path, kind, gpus)}},
                    {"env", {{{"name", "PEREGRINE_MACHINE_ID"}, {"value", node}}}},
                    {"terminationMessagePolicy", "FallbackToLogsOnError"}};
  if (gpus > 0) container["resources"] = {{"limits", {{"nvidia.com/gpu", std::to_string(gpus)}}}};
  json affinity = {
      {"nodeAffinity",
       {{"requiredDuringSchedulingIgnoredDuringExecution",
         {{"nodeSelectorTerms",
           {{{"matchFields", {{{"key", "metadata.name"}, {"operator", "In"}, {"values", {node}}}}}}}}}}}}};
  json tolerations = {
      {{"key", kQuarantineTaintKey}, {"operator", "Exists"}, {"effect", kQuarantineTaintEffect}},
      {{"key", kUnschedulableTaint}, {"operator", "Exists"}, {"effect", "NoSchedule"}}};
  json labels = {{kSweepJobLabel, name}, {"app.kubernetes.io/managed-by", "peregrine"}};
  json annotations = {{kSweepNodeAnnotation, node}, {kSweepAttemptAnnotation, std::to_string(attempt)}};
  json pod_spec = {{"restartPolicy", "Never"},
                  {"affinity", affinity},
                  {"tolerations", tolerations},
                  {"containers", json::array({container})}};
  json pod_template = {{"metadata", {{"labels", labels}, {"annotations", annotations}}}, {"spec", pod_spec}};
  json spec = {{"backoffLimit", 0},
               {"activeDeadlineSeconds", std::max<int64_t>(1, options.lifecycle.sweep_timeout_ns / 1'000'000'000)},
               {"ttlSecondsAfterFinished", kSweepJobTtlSeconds},
               {"template", pod_template}};
  json metadata = {
      {"name", name}, {"namespace", options.sweep_namespace}, {"labels", labels}, {"annotations", annotations}};
  return {{"apiVersion", "batch/v1"}, {"kind", "Job"}, {"metadata", metadata}, {"spec", spec}};
}

NodeHealthController::NodeHealthController(kube::RestClient* client, kube::Informer* nodes,
                                           kube::EventRecorder* events, Clock* clock,
                                           NodeHealthControllerOptions options)
    : client_(client), nodes_(nodes), events_(events), clock_(clock), options_(std::move(options)) {
  if (nodes_ != nullptr) {
    nodes_->AddHandler([this](const std::string&) {
      absl::MutexLock lock(&run_mu_);
      poke_ = true;
      run_cv_.Signal();
    });
  }
}

NodeHealthController::~NodeHealthController() { Stop(); }

int64_t NodeHealthController::NowNs() { return absl::ToUnixNanos(clock_->Now()); }

absl::Status NodeHealthController::RecordNodeEvent(const std::string& node, bool warning, const std::string& reason,
                                                   const std::string& message) {
  // The kubelet uses the node name as the involved object's uid.
  kube::ObjectReference ref{"v1", "Node", "", node, node};
  return events_->Record(ref, warning ? kube::EventType::kWarning : kube::EventType::kNormal, reason, message);
}

absl::Status NodeHealthController::Quarantine(const std::string& machine_id, const std::string& reason) {
  if (machine_id.empty()) return absl::InvalidArgumentError("quarantine: empty machine id");
  absl::MutexLock lock(&mu_);
  return ApplyLocked(machine_id, QuarantineInput(machine_id, reason, NowNs()), /*cordon_on_invalid=*/true);
}

absl::Status NodeHealthController::Apply(const std::string& node, const NodeInput& input) {
  absl::MutexLock lock(&mu_);
  return ApplyLocked(node, input, /*cordon_on_invalid=*/false);
}

absl::Status NodeHealthController::ApplyLocked(const std::string& node_name, NodeInput first,
                                               bool cordon_on_invalid) {
  if (options_.may_write && !options_.may_write()) {
    return absl::UnavailableError("node health: not the leader, may not write");
  }
  std::deque<NodeInput> inputs = {std::move(first)};
  int applied = 0;
  while (!inputs.empty()) {
    if (++applied > kMaxInputsPerApply) return absl::InternalError("node health: too many chained inputs");
    const NodeInput input = inputs.front();
    inputs.pop_front();
    for (int attempt = 0;; ++attempt) {
      auto node = client_->Get(NodesPath(), node_name);
      if (absl::IsNotFound(node.status())) return absl::OkStatus();  // the machine is gone
      if (!node.ok()) return node.status();
      const auto labels = StringMap(*node, "labels");
      const auto annotations = StringMap(*node, "annotations");
      auto record = DecodeNodeHealth(node_name, labels, annotations);
      const bool unschedulable = Unschedulable(*node);
      const bool ours_cordon = labels.count(kQuarantineLabel) > 0;
      json patch = {{"metadata", {{"resourceVersion", Str((*node)["metadata"], "resourceVersion")}}}};
      auto cordon = [&](const std::string& reason) {
        if (!unschedulable) patch["spec"]["unschedulable"] = true;
        if (unschedulable && !ours_cordon) patch["metadata"]["annotations"][kCordonedBeforeAnnotation] = "true";
        if (!HasOurTaint(*node)) {
          json taints = Taints(*node);
          taints.push_back({{"key", kQuarantineTaintKey}, {"value", "true"}, {"effect", kQuarantineTaintEffect}});
          patch["spec"]["taints"] = taints;
        }
        patch["metadata"]["labels"][kQuarantineLabel] = ShortLabelValue(reason);
        patch["metadata"]["annotations"][kQuarantineReasonAnnotation] = reason.substr(0, 1024);
      };
      if (!record.ok()) {
        const std::string message = absl::StrCat("the node health record on Node ", node_name,
                                                 " does not decode: ", record.status().message(),
                                                 "; the record is left as it is (fix or remove the key)");
        (void)RecordNodeEvent(node_name, true, "NodeHealthRecordInvalid", message);
        if (!cordon_on_invalid || (unschedulable && HasOurTaint(*node))) {
          return absl::FailedPreconditionError(message);
        }
        cordon(input.detail);
        auto patched = client_->MergePatch(NodesPath(), node_name, patch);
        if (absl::IsAborted(patched.status()) && attempt < kMaxConflictRetries) continue;
        if (absl::IsNotFound(patched.status())) return absl::OkStatus();
        return patched.status();
      }
      const int64_t now = NowNs();
      auto step = NodeLifecycleStep(*record, input, now, options_.lifecycle);
      if (!step.ok()) return step.status();
      bool write = !(step->record == *record);
      if (input.kind == NodeInputKind::kOperatorReturn && annotations.count(kNodeHealthReturnAnnotation)) {
        patch["metadata"]["annotations"][kNodeHealthReturnAnnotation] = nullptr;  // done
        write = true;
      }
      for (const NodeAction& a : step->actions) {
        if (a.kind == NodeActionKind::kCordonAndTaint) {
          cordon(step->record.reason);
          write = true;
        } else if (a.kind == NodeActionKind::kUncordonAndUntaint) {
          // Never uncordon a Node someone else had cordoned first (cordons.h).
          const auto before = annotations.find(kCordonedBeforeAnnotation);
          const bool others = (before != annotations.end() && before->second == "true") ||
                              (unschedulable && !ours_cordon);
          if (!others && unschedulable) patch["spec"]["unschedulable"] = nullptr;
          if (HasOurTaint(*node)) {
            json kept = json::array();
            for (const json& t : Taints(*node)) {
              if (!IsQuarantineTaint(t)) kept.push_back(t);
            }
            patch["spec"]["taints"] = kept;
          }
          patch["metadata"]["labels"][kQuarantineLabel] = nullptr;
          patch["metadata"]["annotations"][kQuarantineReasonAnnotation] = nullptr;
          patch["metadata"]["annotations"][kCordonedBeforeAnnotation] = nullptr;
          write = true;
        }
      }
      if (write) {
        const NodeHealthMetadata meta = EncodeNodeHealth(step->record);
        patch["metadata"]["labels"][kNodeHealthLabel] = meta.labels.at(kNodeHealthLabel);
        for (const char* key : kNodeHealthAnnotationKeys) {
          auto it = meta.annotations.find(key);
          if (it != meta.annotations.end()) {
            patch["metadata"]["annotations"][key] = it->second;
          } else if (annotations.count(key)) {
            patch["metadata"]["annotations"][key] = nullptr;
          }
        }
        auto patched = client_->MergePatch(NodesPath(), node_name, patch);
        if (absl::IsAborted(patched.status()) && attempt < kMaxConflictRetries) continue;  // 409: step again
        if (absl::IsNotFound(patched.status())) return absl::OkStatus();
        if (!patched.ok()) return patched.status();
        *node = std::move(*patched);
      }
      absl::Status first_error;
      for (const NodeAction& a : step->actions) {
        if (a.kind == NodeActionKind::kEvent) {
          if (auto s = RecordNodeEvent(node_name, a.warning, a.reason, a.message); !s.ok() && first_error.ok()) {
            first_error = s;
          }
        } else if (a.kind == NodeActionKind::kStartSweep && !options_.sweep_image.empty()) {
          auto next = StartSweep(*node, a);
          if (!next.ok()) return next.status();
          for (NodeInput& n : *next) inputs.push_back(std::move(n));
        }
      }
      if (!first_error.ok()) return first_error;
      break;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<NodeInput>> NodeHealthController::StartSweep(const json& node, const NodeAction& action) {
  const std::string node_name = Str(node["metadata"], "name");
  const int attempt = action.sweep_attempt;
  const int64_t now = NowNs();
  auto not_started = [&](std::string why) {
    NodeInput in;
    in.kind = NodeInputKind::kSweepNotStarted;
    in.at = now;
    in.sweep_attempt = attempt;
    in.detail = std::move(why);
    return std::vector<NodeInput>{std::move(in)};
  };
  const std::string name = SweepJobName(node_name, attempt);
  const kube::ResourcePath jobs = JobsPath(options_.sweep_namespace);
  auto job = client_->Get(jobs, name);
  if (absl::IsNotFound(job.status())) {
    auto created =
        client_->Create(jobs, BuildSweepJob(options_, node_name, attempt, action.sweep_kind, AllocatableGpus(node)));
    if (!created.ok() && kube::KubeReason(created.status()) != "AlreadyExists") {
      if (absl::IsInvalidArgument(created.status()) || absl::IsPermissionDenied(created.status())) {
        return not_started(absl::StrCat("the sweep Job was refused: ", created.status().message()));
      }
      return created.status();
    }
    return std::vector<NodeInput>{};  // its pod is on its way: the next pass looks again
  }
  if (!job.ok()) return job.status();
  if (Path(*job, {"metadata", "deletionTimestamp"}) != nullptr) return std::vector<NodeInput>{};  // going away
  NodeInput started;
  started.kind = NodeInputKind::kSweepStarted;
  started.sweep_attempt = attempt;
  const int64_t job_start = ParseTime(Path(*job, {"status", "startTime"}));
  started.at = job_start > 0 ? std::min(job_start, now) : now;
  started.detail = absl::StrCat("Job ", options_.sweep_namespace, "/", name);
  const bool finished = JobCondition(*job, "Complete") || JobCondition(*job, "Failed") ||
                        JobCount(*job, "succeeded") > 0 || JobCount(*job, "failed") > 0;
  if (finished || JobCount(*job, "ready") > 0) return std::vector<NodeInput>{started};
  kube::ListOptions lo;
  lo.label_selector = absl::StrCat(kSweepJobLabel, "=", name);
  auto pods = client_->List(PodsPath(options_.sweep_namespace), lo);
  if (!pods.ok()) return pods.status();
  for (const json& pod : (*pods)["items"]) {
    const std::string phase = Str(pod["status"], "phase");
    if (phase == "Running" || phase == "Succeeded" || phase == "Failed") return std::vector<NodeInput>{started};
    if (const std::string stuck = PodStuckReason(pod); !stuck.empty()) {
      // Deleted so that the retry (the same attempt) starts from a fresh Job.
      kube::DeleteOptions d;
      d.propagation_policy = "Background";
      if (auto s = client_->Delete(jobs, name, d); !s.ok() && !absl::IsNotFound(s)) return s;
      return not_started(absl::StrCat("pod ", Str(pod["metadata"], "name"), " of Job ", name, ": ", stuck));
    }
  }
  return std::vector<NodeInput>{};
}

absl::StatusOr<std::optional<NodeInput>> NodeHealthController::ObserveSweep(const NodeHealthRecord& record) {
  const std::string name = SweepJobName(record.node, record.sweep_attempts);
  NodeInput in;
  in.sweep_attempt = record.sweep_attempts;
  in.at = NowNs();
  auto job = client_->Get(JobsPath(options_.sweep_namespace), name);
  if (absl::IsNotFound(job.status())) {
    in.kind = NodeInputKind::kSweepFailed;
    in.detail = absl::StrCat("its Job ", options_.sweep_namespace, "/", name, " is gone");
    return std::optional<NodeInput>(in);
  }
  if (!job.ok()) return job.status();
  const int64_t done = ParseTime(Path(*job, {"status", "completionTime"}));
  if (JobCondition(*job, "Complete") || JobCount(*job, "succeeded") > 0) {
    in.kind = NodeInputKind::kSweepPassed;
    if (done > 0) in.at = std::min(in.at, std::max(done, record.sweep_started_at));
    return std::optional<NodeInput>(in);
  }
  if (auto failed = JobCondition(*job, "Failed"); failed || JobCount(*job, "failed") > 0) {
    in.kind = NodeInputKind::kSweepFailed;
    in.detail = absl::StrCat("Job ", options_.sweep_namespace, "/", name, " failed",
                             failed && !failed->empty() ? absl::StrCat(": ", *failed) : std::string(),
                             " (kubectl logs -n ", options_.sweep_namespace, " job/", name, ")");
    return std::optional<NodeInput>(in);
  }
  return std::optional<NodeInput>();
}

absl::Status NodeHealthController::Pass() {
  if (options_.may_write && !options_.may_write()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  std::vector<NodeHealthRecord> records;
  for (const kube::ObjectPtr& node : nodes_->List()) {
    const std::string name = Str((*node)["metadata"], "name");
    const auto labels = StringMap(*node, "labels");
    const auto annotations = StringMap(*node, "annotations");
    auto record = DecodeNodeHealth(name, labels, annotations);
    if (!record.ok()) {
      (void)RecordNodeEvent(name, true, "NodeHealthRecordInvalid",
                            absl::StrCat("the node health record on Node ", name,
                                         " does not decode: ", record.status().message(),
                                         "; the record is left as it is (fix or remove the key)"));
      continue;
    }
    records.push_back(*record);
  }
  counts_ = CountNodeHealth(records);
  if (options_.on_counts) options_.on_counts(counts_);
  absl::Status first_error;
  auto note = [&](absl::Status s) {
    if (!s.ok() && first_error.ok()) first_error = s;
  };
  const int64_t now = NowNs();
  std::map<std::string, bool> due;
  for (const DueWork& w : ListDueWork(records, now, options_.lifecycle)) due[w.node] = true;
  for (const NodeHealthRecord& r : records) {
    kube::ObjectPtr cached = nodes_->Get(r.node);
    if (cached != nullptr) {
      if (const json* ret = Path(*cached, {"metadata", "annotations", kNodeHealthReturnAnnotation}); ret != nullptr) {
        NodeInput back;
        back.kind = NodeInputKind::kOperatorReturn;
        back.at = now;
        back.detail = ret->is_string() ? ret->get<std::string>().substr(0, 256) : std::string();
        note(ApplyLocked(r.node, back, false));
        continue;
      }
      if (DesiredNodeState(r).cordoned_and_tainted && (!Unschedulable(*cached) || !HasOurTaint(*cached))) {
        note(RestoreQuarantineLocked(r.node));
      }
    }
    if (r.state == NodeHealth::kSweeping && !due.count(r.node)) {
      auto result = ObserveSweep(r);
      if (!result.ok()) {
        note(result.status());
      } else if (*result) {
        note(ApplyLocked(r.node, **result, false));
      }
      continue;
    }
    if (due.count(r.node)) {
      NodeInput tick;
      tick.kind = NodeInputKind::kTick;
      tick.at = now;
      note(ApplyLocked(r.node, tick, false));
    }
  }
  return first_error;
}

absl::Status NodeHealthController::RestoreQuarantineLocked(const std::string& node_name) {
  for (int attempt = 0;; ++attempt) {
    auto node = client_->Get(NodesPath(), node_name);
    if (absl::IsNotFound(node.status())) return absl::OkStatus();
    if (!node.ok()) return node.status();
    auto record = DecodeNodeHealth(node_name, StringMap(*node, "labels"), StringMap(*node, "annotations"));
    if (!record.ok() || !DesiredNodeState(*record).cordoned_and_tainted) return absl::OkStatus();  // changed since
    const bool unschedulable = Unschedulable(*node);
    const bool tainted = HasOurTaint(*node);
    if (unschedulable && tainted) return absl::OkStatus();
    json patch = {{"metadata", {{"resourceVersion", Str((*node)["metadata"], "resourceVersion")}}}};
    if (!unschedulable) patch["spec"]["unschedulable"] = true;
    if (!tainted) {
      json taints = Taints(*node);
      taints.push_back({{"key", kQuarantineTaintKey}, {"value", "true"}, {"effect", kQuarantineTaintEffect}});
      patch["spec"]["taints"] = taints;
    }
    auto patched = client_->MergePatch(NodesPath(), node_name, patch);
    if (absl::IsAborted(patched.status()) && attempt < kMaxConflictRetries) continue;
    if (absl::IsNotFound(patched.status())) return absl::OkStatus();
    if (!patched.ok()) return patched.status();
    return RecordNodeEvent(
        node_name, true, "NodeQuarantineRestored",
        absl::StrCat("the Node is ", NodeHealthName(record->state), " but was ",
                     !unschedulable && !tainted ? "uncordoned and untainted"
                     : !unschedulable           ? "uncordoned"
                                                : "untainted",
                     " by someone else: cordon and taint restored; to return it to service, annotate it ",
                     kNodeHealthReturnAnnotation, "=<note>"));
  }
}

std::array<int64_t, kNodeHealthStates> NodeHealthController::Counts() {
  absl::MutexLock lock(&mu_);
  return counts_;
}

void NodeHealthController::Start() {
  absl::MutexLock lock(&run_mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { Run(); });
}

void NodeHealthController::Stop() {
  {
    absl::MutexLock lock(&run_mu_);
    stopping_ = true;
    run_cv_.Signal();
  }
  if (thread_.joinable()) thread_.join();
}

void NodeHealthController::Run() {
  for (;;) {
    (void)Pass();  // errors are retried at the next pass
    absl::MutexLock lock(&run_mu_);
    const absl::Time deadline = clock_->Now() + options_.resync;
    while (!stopping_ && !poke_ && !clock_->WaitWithDeadline(run_cv_, run_mu_, deadline)) {
    }
    if (stopping_) return;
    poke_ = false;
  }
}

}  // namespace peregrine
