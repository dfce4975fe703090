// sim-trainer: flags and environment -> TrainerOptions -> RunTrainer.
//
// Environment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// PEREGRINE_TP, PEREGRINE_PP, PEREGRINE_DP, PEREGRINE_RESUME_STEP, PEREGRINE_MACHINE_ID,
// PEREGRINE_SIM_FAULTS (and PEREGRINE_NCCL_TIMEOUT_MS for the stand-in NCCL).
// Checkpoints (trainer.h): PEREGRINE_CHECKPOINT_INTERVAL (save every N steps, 0: off) and
// the store the client library reads (PEREGRINE_CHECKPOINT_DIR, ...).
// Dual-phase replay: PEREGRINE_REPLAY=1 with PEREGRINE_REPLAY_LAYERS, PEREGRINE_REPLAY_STEPS
// and PEREGRINE_REPLAY_SEED (each optional) override --steps/--seed, start from step 1 and
// replay with that many layers (trainer.h).
// Flags: --steps N --micro-batches M --hidden H --compute-ms X --seed S
//        --dp-mode allreduce|rs-ag --init-timeout-s T --weights-out PATH ("{rank}": the rank;
//        the final weights as raw float32) --startup-ms T (wait before joining the world,
//        a stand-in for a real trainer's start-up) --no-plans (ignore micro-batch plans)
// Micro-batch plans: PEREGRINE_MICROBATCH_PLAN, read through the client library (trainer.h).
//        --reference-step: the alignment diagnostic's reference step instead of training
//        (sim/trainer/reference_step.h; uses RANK, WORLD_SIZE, MASTER_*, --seed, --steps)
// Output: after every step, on every rank, one stdout line
//   [peregrine] step=<n> loss=<%.9g> grad_norm=<%.9g> iter_ms=<%.3f> mb=<micro-batches run>
// (mb= is left out with --no-plans)
// (plus model_ms=<%.3f>, the modelled device time of the step's compute, with --compute-ms)
// and at the end "[peregrine] final step=<n> weight_digest=<sha256 hex>".
// Exit: 0 after the last step, 2 on bad configuration, 3 on any NCCL error, 4 when the
// checkpoint to resume from is missing or unusable, 5 when the micro-batch plan file is
// unusable, 143 on SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "sim/trainer/reference_step.h"
#include "sim/trainer/trainer.h"

namespace {

void OnTerminate(int) {
  static const char kMsg[] = "[peregrine] sim-trainer: terminated by signal\n";
  ssize_t ignored = write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
  (void)ignored;
  _exit(143);
}

bool ParseInt(const char* text, long long lo, long long hi, long long* out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool EnvInt(const char* name, long long lo, long long hi, int* out, bool required) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    if (required) std::fprintf(stderr, "sim-trainer: environment variable %s is required\n", name);
    return !required;
  }
  long long x;
  if (!ParseInt(v, lo, hi, &x)) {
    std::fprintf(stderr, "sim-trainer: %s='%s' is not an integer in [%lld, %lld]\n", name, v, lo, hi);
    return false;
  }
  *out = static_cast<int>(x);
  return true;
}

void Usage() {
  std::fprintf(stderr,
               "usage: sim-trainer [--steps N] [--micro-batches M] [--hidden H] [--compute-ms X]\n"
               "                   [--seed S] [--dp-mode allreduce|rs-ag] [--init-timeout-s T]\n"
               "                   [--weights-out PATH] [--startup-ms T] [--no-plans]\n"
               "       sim-trainer --reference-step [--seed S] [--steps N] [--init-timeout-s T]\n");
}

}  // namespace

int main(int argc, char** argv) {
  struct sigaction sa {};
  sa.sa_handler = OnTerminate;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  peregrine::sim::TrainerOptions o;
  bool ok = EnvInt("RANK", 0, 1 << 20, &o.rank, false) &&
            EnvInt("WORLD_SIZE", 1, 1 << 20, &o.world_size, false) &&
            EnvInt("LOCAL_RANK", 0, 1 << 20, &o.local_rank, false) &&
            EnvInt("LOCAL_WORLD_SIZE", 1, 1 << 20, &o.local_world_size, false) &&
            EnvInt("MASTER_PORT", 1, 65535, &o.master_port, false) &&
            EnvInt("PEREGRINE_TP", 1, 1 << 20, &o.tp, false) &&
            EnvInt("PEREGRINE_PP", 1, 1 << 20, &o.pp, false) &&
            EnvInt("PEREGRINE_DP", 1, 1 << 20, &o.dp, false) &&
            EnvInt("PEREGRINE_RESUME_STEP", 0, 1 << 30, &o.resume_step, false) &&
            EnvInt("PEREGRINE_CHECKPOINT_INTERVAL", 0, 1 << 30, &o.checkpoint_interval, false);
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    o.master_addr = addr;
  }
  bool reference_step = false;
  for (int i = 1; ok && i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--reference-step") {
      reference_step = true;
      continue;
    }
    if (arg == "--no-plans") {
      o.no_plans = true;
      continue;
    }
    std::string value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (arg == "--help" || arg == "-h") {
      Usage();
      return 0;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "sim-trainer: flag %s needs a value\n", arg.c_str());
      ok = false;
      break;
    }
    long long v = 0;
    if (arg == "--steps" && ParseInt(value.c_str(), 0, 1 << 30, &v)) {
      o.steps = static_cast<int>(v);
    } else if (arg == "--micro-batches" && ParseInt(value.c_str(), 1, 1 << 20, &v)) {
      o.micro_batches = static_cast<int>(v);
    } else if (arg == "--hidden" && ParseInt(value.c_str(), 1, 1 << 16, &v)) {
      o.hidden = static_cast<int>(v);
    } else if (arg == "--seed" && ParseInt(value.c_str(), 0, (1ll << 62), &v)) {
      o.seed = static_cast<uint64_t>(v);
    } else if (arg == "--init-timeout-s" && ParseInt(value.c_str(), 1, 86400, &v)) {
      o.init_timeout_ms = static_cast<int>(v * 1000);
    } else if (arg == "--compute-ms") {
      char* end = nullptr;
      o.compute_ms = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0' || !(o.compute_ms >= 0) || o.compute_ms > 1e6) {
        std::fprintf(stderr, "sim-trainer: --compute-ms '%s' is not a number in [0, 1e6]\n",
                     value.c_str());
        ok = false;
      }
    } else if (arg == "--startup-ms" && ParseInt(value.c_str(), 0, 3'600'000, &v)) {
      o.startup_ms = static_cast<int>(v);
    } else if (arg == "--weights-out" && !value.empty()) {
      o.weights_out = value;
    } else if (arg == "--dp-mode" && (value == "allreduce" || value == "rs-ag")) {
      o.dp_reduce_scatter = value == "rs-ag";
    } else {
      std::fprintf(stderr, "sim-trainer: bad flag or value: %s %s\n", arg.c_str(), value.c_str());
      ok = false;
    }
  }
  if (const char* replay = std::getenv("PEREGRINE_REPLAY"); ok && replay != nullptr && std::string(replay) == "1") {
    o.replay = true;
    o.resume_step = 0;
    o.checkpoint_interval = 0;
    int seed = -1;
    ok = EnvInt("PEREGRINE_REPLAY_LAYERS", 1, 1 << 16, &o.layers, false) &&
         EnvInt("PEREGRINE_REPLAY_STEPS", 1, 1 << 30, &o.steps, false) &&
         EnvInt("PEREGRINE_REPLAY_SEED", 0, 2147483647, &seed, false);
    if (seed >= 0) o.seed = static_cast<uint64_t>(seed);
  }
  if (!ok) {
    Usage();
    return peregrine::sim::kExitUsage;
  }
  if (reference_step) {
    peregrine::sim::ReferenceStepOptions r;
    r.rank = o.rank;
    r.world_size = o.world_size;
    r.master_addr = o.master_addr;
    r.master_port = o.master_port;
    r.seed = o.seed;
    r.steps = o.steps;
    r.init_timeout_ms = o.init_timeout_ms;
    return peregrine::sim::RunReferenceStep(r);
  }
  return peregrine::sim::RunTrainer(o);
}
