#include "fleetsim/sim_flags.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace peregrine::fleetsim {
namespace {

using Field = std::pair<std::string, std::function<double*(SimCommandLine*)>>;

void AddSlowFields(const std::string& prefix, FailSlowModel FaultModel::*member, std::vector<Field>* out) {
  const std::pair<const char*, double FailSlowModel::*> fields[] = {
      {"episodes_per_machine_day", &FailSlowModel::episodes_per_machine_day},
      {"duration_mean_s", &FailSlowModel::duration_mean_s},
      {"duration_sigma", &FailSlowModel::duration_sigma},
      {"duration_min_s", &FailSlowModel::duration_min_s},
      {"duration_max_s", &FailSlowModel::duration_max_s},
      {"severity_median", &FailSlowModel::severity_median},
      {"severity_sigma", &FailSlowModel::severity_sigma},
      {"severity_max", &FailSlowModel::severity_max},
  };
  for (const auto& [name, field] : fields) {
    out->push_back({absl::StrCat(prefix, ".", name),
                    [member, field](SimCommandLine* l) { return &((l->faults.*member).*field); }});
  }
}

// Every double-valued --set field.
const std::vector<Field>& DoubleFields() {
  static const std::vector<Field>* fields = [] {
    auto* f = new std::vector<Field>;
    const std::pair<const char*, double CostModel::*> costs[] = {
        {"failstop_detection_s", &CostModel::failstop_detection_s},
        {"diagnosis_s", &CostModel::diagnosis_s},
        {"restart_s", &CostModel::restart_s},
        {"pod_start_s", &CostModel::pod_start_s},
        {"standby_swap_s", &CostModel::standby_swap_s},
        {"requeue_s", &CostModel::requeue_s},
        {"memory_checkpoint_save_s", &CostModel::memory_checkpoint_save_s},
        {"memory_checkpoint_interval_s", &CostModel::memory_checkpoint_interval_s},
        {"disk_checkpoint_save_s", &CostModel::disk_checkpoint_save_s},
        {"disk_checkpoint_interval_s", &CostModel::disk_checkpoint_interval_s},
        {"memory_restore_s", &CostModel::memory_restore_s},
        {"disk_restore_s", &CostModel::disk_restore_s},
        {"machine_return_s", &CostModel::machine_return_s},
    };
    for (const auto& [name, field] : costs) {
      f->push_back({name, [field](SimCommandLine* l) { return &(l->costs.*field); }});
    }
    const std::pair<const char*, double FaultModel::*> model[] = {
        {"gpu_per_gpu_day", &FaultModel::gpu_per_gpu_day},
        {"memory_per_gpu_day", &FaultModel::memory_per_gpu_day},
        {"nic_per_gpu_day", &FaultModel::nic_per_gpu_day},
        {"host_per_gpu_day", &FaultModel::host_per_gpu_day},
        {"software_per_gpu_day", &FaultModel::software_per_gpu_day},
        {"grey_fraction", &FaultModel::grey_fraction},
        {"grey_multiplier", &FaultModel::grey_multiplier},
        {"gpu_repair_mean_s", &FaultModel::gpu_repair_mean_s},
        {"memory_repair_mean_s", &FaultModel::memory_repair_mean_s},
        {"nic_repair_mean_s", &FaultModel::nic_repair_mean_s},
        {"host_repair_mean_s", &FaultModel::host_repair_mean_s},
        {"software_repair_mean_s", &FaultModel::software_repair_mean_s},
    };
    for (const auto& [name, field] : model) {
      f->push_back({name, [field](SimCommandLine* l) { return &(l->faults.*field); }});
    }
    AddSlowFields("slow_compute", &FaultModel::slow_compute, f);
    AddSlowFields("slow_link", &FaultModel::slow_link, f);
    f->push_back({"standby_daily_failure_rate", [](SimCommandLine* l) { return &l->options.standby_daily_failure_rate; }});
    f->push_back({"resync_s", [](SimCommandLine* l) { return &l->options.resync_s; }});
    return f;
  }();
  return *fields;
}

absl::Status ParseInt(const std::string& flag, const std::string& value, int* out) {
  if (!absl::SimpleAtoi(value, out)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": \"", value, "\" is not an integer"));
  }
  return absl::OkStatus();
}

absl::Status ParseDouble(const std::string& flag, const std::string& value, double* out) {
  if (!absl::SimpleAtod(value, out) || !std::isfinite(*out)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": \"", value, "\" is not a finite number"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> SimFieldNames() {
  std::vector<std::string> names;
  for (const Field& f : DoubleFields()) names.push_back(f.first);
  names.push_back("spare_machines");
  names.push_back("standby_min");
  return names;
}

absl::Status SetSimField(const std::string& name, const std::string& value, SimCommandLine* line) {
  const std::string flag = absl::StrCat("--set=", name);
  if (name == "spare_machines") return ParseInt(flag, value, &line->options.spare_machines);
  if (name == "standby_min") return ParseInt(flag, value, &line->options.standby_min);
  for (const Field& f : DoubleFields()) {
    if (f.first == name) return ParseDouble(flag, value, f.second(line));
  }
  return absl::InvalidArgumentError(absl::StrCat("--set: unknown field \"", name, "\" (known: ",
                                                 absl::StrJoin(SimFieldNames(), ", "), ")"));
}

absl::StatusOr<SimCommandLine> ParseSimCommandLine(const std::vector<std::string>& args) {
  SimCommandLine line;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!absl::StartsWith(arg, "--")) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", arg, "\" (flags start with --)"));
    }
    std::string flag = arg;
    std::string value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    if (flag == "--json" || flag == "--help" || flag == "--skip-variants" || flag == "--events") {
      if (has_value) return absl::InvalidArgumentError(absl::StrCat(flag, ": takes no value"));
      (flag == "--json"   ? line.json
       : flag == "--help" ? line.help
       : flag == "--events" ? line.events
                            : line.skip_variants) = true;
      continue;
    }
    const bool known = flag == "--gpus" || flag == "--gpus-per-machine" || flag == "--days" ||
                       flag == "--step-time" || flag == "--seed" || flag == "--trace" || flag == "--set";
    if (!known) return absl::InvalidArgumentError(absl::StrCat("unknown flag ", flag, " (see --help)"));
    if (!has_value) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat(flag, ": needs a value"));
      value = args[++i];
    }
    if (flag == "--gpus") {
      if (absl::Status s = ParseInt(flag, value, &line.shape.gpus); !s.ok()) return s;
    } else if (flag == "--gpus-per-machine") {
      if (absl::Status s = ParseInt(flag, value, &line.shape.gpus_per_machine); !s.ok()) return s;
    } else if (flag == "--days") {
      if (absl::Status s = ParseDouble(flag, value, &line.shape.days); !s.ok()) return s;
    } else if (flag == "--step-time") {
      if (absl::Status s = ParseDouble(flag, value, &line.shape.step_time_s); !s.ok()) return s;
    } else if (flag == "--seed") {
      if (!absl::SimpleAtoi(value, &line.shape.seed)) {
        return absl::InvalidArgumentError(absl::StrCat("--seed: \"", value, "\" is not a non-negative integer"));
      }
    } else if (flag == "--trace") {
      if (value.empty()) return absl::InvalidArgumentError("--trace: needs a file name");
      line.trace_path = value;
    } else {  // --set
      const size_t eq = value.find('=');
      if (eq == std::string::npos || eq == 0) {
        return absl::InvalidArgumentError(absl::StrCat("--set: \"", value, "\" is not NAME=VALUE"));
      }
      if (absl::Status s = SetSimField(value.substr(0, eq), value.substr(eq + 1), &line); !s.ok()) return s;
    }
  }
  return line;
}

std::string SimUsage() {
  return absl::StrCat(
      "usage: peregrine-sim [--gpus N] [--gpus-per-machine N] [--days D] [--step-time S] [--seed N]\n"
      "                     [--trace FILE] [--json] [--skip-variants] [--events] [--set=NAME=VALUE ...]\n"
      "Simulates a training job of N GPUs over D days on Peregrine's decision core and beside\n"
      "the baselines (requeue from disk, warm standby without in-memory checkpoints, no\n"
      "fail-slow mitigation, an oracle), on the same faults: drawn from the fault model for\n"
      "the seed, or read from FILE (CSV node,start_s,end_s,kind[,severity]). --skip-variants\n"
      "leaves out the two Peregrine variants (timing runs); --events prints the decision core's\n"
      "events of the first (peregrine) run on stderr, one a line with its simulated second.\n"
      "Defaults: --gpus 1024 --gpus-per-machine 8 --days 7 --step-time 10 --seed 1.\n"
      "--set fields: ",
      absl::StrJoin(SimFieldNames(), ", "), "\n");
}

}  // namespace peregrine::fleetsim
