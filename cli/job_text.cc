#include "cli/job_text.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace peregrine {

using nlohmann::json;

namespace {

// Typed reads that never throw: a missing field or one of another type is the default.
const json& Field(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}
std::string Str(const json& j, const char* key, const std::string& absent = "") {
  const json& v = Field(j, key);
  return v.is_string() ? v.get<std::string>() : absent;
}
double Num(const json& j, const char* key, double absent = 0) {
  const json& v = Field(j, key);
  return v.is_number() ? v.get<double>() : absent;
}
int64_t Int(const json& j, const char* key, int64_t absent = 0) {
  const json& v = Field(j, key);
  return v.is_number() ? v.get<int64_t>() : absent;
}
json Arr(const json& j, const char* key) {
  const json& v = Field(j, key);
  return v.is_array() ? v : json::array();
}

std::string Fixed(double v, int digits) { return absl::StrFormat("%.*f", digits, v); }

void PrintIncident(const json& inc, std::ostream& out) {
  out << "  #" << Int(inc, "id") << " " << Str(inc, "kind", "?") << " at " << Str(inc, "detectedAt", "-") << ": "
      << Str(inc, "signal") << "\n    decision: " << Str(inc, "decision", "(triaging)") << "  lost "
      << Fixed(Num(inc, "trainingTimeLostSeconds"), 2) << " s\n";
  for (const json& a : Arr(inc, "actions")) {
    if (a.is_string()) out << "    - " << a.get<std::string>() << "\n";
  }
}

}  // namespace

absl::StatusOr<json> JobViewFromObject(const json& object) {
  const json& meta = Field(object, "metadata");
  const std::string ns = Str(meta, "namespace"), name = Str(meta, "name");
  if (!Field(object, "spec").is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("TrainingJob ", ns, "/", name, " has no spec object"));
  }
  const json& status = Field(object, "status");
  if (status.is_null() || (status.is_object() && status.empty())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "TrainingJob ", ns, "/", name, " has no status yet: is the Peregrine controller running and watching namespace ",
        ns, "?"));
  }
  if (!status.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("TrainingJob ", ns, "/", name, " has a status that is not an object"));
  }
  return json{{"namespace", ns}, {"name", name}, {"spec", object["spec"]}, {"status", status}};
}

void PrintJobStatus(const json& j, std::ostream& out) {
  const json& st = Field(j, "status");
  const json& spec = Field(j, "spec");
  const json& par = Field(spec, "parallelism");
  const json& standby = Field(st, "standby");
  out << "job " << Str(j, "namespace") << "/" << Str(j, "name") << ": " << Int(spec, "machines") << " machines x "
      << Int(spec, "gpusPerMachine") << " GPUs, TP=" << Int(par, "tensor", 1) << " PP=" << Int(par, "pipeline", 1)
      << " DP=" << Int(par, "data", 1) << "\n";
  out << "phase " << Str(st, "phase", "?") << "  attempt " << Int(st, "attempt") << "  step "
      << Int(st, "lastCompletedStep") << "  ETTR " << Fixed(Num(st, "ettr", 1.0), 3) << "  lost "
      << Fixed(Num(st, "trainingTimeLostSeconds"), 2) << " s  standby " << Int(standby, "ready") << "/"
      << Int(standby, "desired") << "\n";
  if (Field(st, "codeVersion").is_object()) {
    out << "code revision " << Str(Field(st, "codeVersion"), "revision", "-");
    if (Field(st, "pendingCode").is_object()) {
      out << "  (waiting: revision " << Str(Field(st, "pendingCode"), "revision", "-") << ")";
    }
    out << "\n";
  }
  const int64_t gpus = Int(spec, "gpusPerMachine");
  out << "SLOT  POD              MACHINE  RANKS\n";
  for (const json& m : Arr(st, "machines")) {
    const int64_t idx = Int(m, "index");
    out << absl::StrFormat("%-5d %-16s %-8s %d-%d\n", idx, Str(m, "pod"), Str(m, "machineId"), idx * gpus,
                           (idx + 1) * gpus - 1);
  }
  for (const json& m : Arr(standby, "pods")) {
    out << absl::StrFormat("%-5s %-16s %-8s\n", "-", Str(m, "pod"), Str(m, "machineId"));
  }
  // A large job's status keeps its machines compactly (machineTable): counts here, the
  // list from the controller's API (GET /api/v1/jobs/NAMESPACE/NAME/machines).
  if (const json& summary = Field(st, "machineSummary"); summary.is_object() && !Field(st, "machines").is_array()) {
    out << "machines: " << Int(summary, "total") << " (" << Int(summary, "observed") << " seen running, "
        << Int(summary, "replaced") << " replaced, " << Int(summary, "nodeUnready")
        << " on unready nodes); the list: GET /api/v1/jobs/" << Str(j, "namespace") << "/" << Str(j, "name")
        << "/machines on the controller\n";
  }
  const json conditions = Arr(st, "conditions");
  if (!conditions.empty()) {
    out << "conditions:\n";
    for (const json& c : conditions) {
      out << "  " << Str(c, "type", "?") << "=" << Str(c, "status", "?");
      if (const std::string reason = Str(c, "reason"); !reason.empty()) out << " (" << reason << ")";
      if (const std::string message = Str(c, "message"); !message.empty()) out << ": " << message;
      out << "\n";
    }
  }
  const json incidents = Arr(st, "incidents");
  out << "incidents: " << incidents.size();
  const size_t shown = std::min(incidents.size(), kStatusIncidents);
  if (shown < incidents.size()) out << " (the latest " << shown << "; `incidents " << Str(j, "name") << "` lists all)";
  out << "\n";
  for (size_t i = incidents.size() - shown; i < incidents.size(); ++i) PrintIncident(incidents[i], out);
  const json evicted = Arr(st, "evictedMachines");
  if (!evicted.empty()) {
    out << "evicted machines:";
    for (const json& e : evicted) out << " " << Str(e, "machineId");
    out << "\n";
  }
}

void PrintJobIncidents(const json& j, std::ostream& out) {
  const json incidents = Arr(Field(j, "status"), "incidents");
  out << "job " << Str(j, "namespace") << "/" << Str(j, "name") << ": " << incidents.size() << " incident"
      << (incidents.size() == 1 ? "" : "s") << ", " << Fixed(Num(Field(j, "status"), "trainingTimeLostSeconds"), 2)
      << " s of training time lost in all\n";
  for (const json& inc : incidents) {
    PrintIncident(inc, out);
    out << "    detected " << Str(inc, "detectedAt", "-") << "  decided " << Str(inc, "decidedAt", "-")
        << "  resumed " << Str(inc, "resumedAt", "-") << "  step " << Int(inc, "stepAtFailure") << " -> "
        << Int(inc, "resumeStep") << "\n";
  }
}

void PrintJobTimeline(const json& j, const json& events, std::ostream& out) {
  // (time, order of arrival, text); entries whose time does not parse go last.
  struct Entry {
    bool timed;
    absl::Time at;
    size_t seq;
    std::string when, text;
  };
  std::vector<Entry> entries;
  auto add = [&](const std::string& when, std::string text) {
    if (when.empty()) return;
    absl::Time t;
    std::string ignored;
    const bool ok = absl::ParseTime(absl::RFC3339_full, when, &t, &ignored);
    entries.push_back({ok, ok ? t : absl::InfinitePast(), entries.size(), when, std::move(text)});
  };
  size_t event_count = 0;
  for (const json& e : events.is_array() ? events : json::array()) {
    std::string when = Str(e, "firstTimestamp");
    if (when.empty()) when = Str(e, "eventTime");
    if (when.empty()) when = Str(e, "lastTimestamp");
    if (when.empty()) when = Str(Field(e, "metadata"), "creationTimestamp");
    std::string text = absl::StrFormat("%-8s %-22s %s", Str(e, "type", "-"), Str(e, "reason", "-"), Str(e, "message"));
    if (const int64_t count = Int(e, "count", 1); count > 1) {
      absl::StrAppend(&text, " (x", count, ", last ", Str(e, "lastTimestamp", "-"), ")");
    }
    // (The "-" goes in as a string: GCC 12's -Wrestrict misfires on assigning a short
    // literal to a std::string here.)
    add(when.empty() ? std::string(1, '-') : std::move(when), std::move(text));
    ++event_count;
  }
  const json incidents = Arr(Field(j, "status"), "incidents");
  for (const json& inc : incidents) {
    const std::string id = absl::StrCat("incident #", Int(inc, "id"));
    add(Str(inc, "detectedAt"), absl::StrFormat("%-8s %-22s %s: %s", "Incident", id + " detected", Str(inc, "kind", "?"),
                                                Str(inc, "signal")));
    add(Str(inc, "decidedAt"), absl::StrFormat("%-8s %-22s %s", "Incident", id + " decided", Str(inc, "decision")));
    add(Str(inc, "resumedAt"), absl::StrFormat("%-8s %-22s training resumed at step %d (%s s lost)", "Incident",
                                               id + " resumed", Int(inc, "resumeStep"),
                                               Fixed(Num(inc, "trainingTimeLostSeconds"), 2)));
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::make_tuple(!a.timed, a.at, a.seq) < std::make_tuple(!b.timed, b.at, b.seq);
  });
  out << "job " << Str(j, "namespace") << "/" << Str(j, "name") << ": " << event_count << " event"
      << (event_count == 1 ? "" : "s") << ", " << incidents.size() << " incident" << (incidents.size() == 1 ? "" : "s")
      << "\n";
  out << absl::StrFormat("%-27s %-8s %-22s %s\n", "TIME", "TYPE", "REASON", "MESSAGE");
  for (const Entry& e : entries) out << absl::StrFormat("%-27s %s\n", e.when, e.text);
}

}  // namespace peregrine
