// Fuzzes the controller's handling of agent stream messages (controller/agent_registry.h):
// the input is parsed as a serialized v1::AgentMessage (what gRPC hands the service) and
// given to AgentRegistry::OnMessage from a registered agent of a bound job, then the job
// is observed. A message that does not fit must be refused with an error, never crash.
// The registry is built fresh for every input, so runs are independent.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "controller/agent_registry.h"
#include "controller/job_parser.h"
#include "fuzz/fuzz_check.h"
#include "peregrine/v1/agent.pb.h"

namespace {

// A 2-machine job (2 GPUs each, TP=2, DP=2).
constexpr char kJob[] = R"(
apiVersion: peregrine.dev/v1alpha1
kind: TrainingJob
metadata: {name: j, namespace: default}
spec:
  machines: 2
  gpusPerMachine: 2
  parallelism: {tensor: 2, pipeline: 1, data: 2}
  codeVersion: {command: ["sim-trainer", "--steps", "10"], revision: v1}
)";

class DiscardingSink : public peregrine::AgentStreamSink {
 public:
  void Send(const peregrine::v1::ControllerMessage& /*message*/) override {}
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  peregrine::v1::AgentMessage message;
  if (!message.ParseFromArray(data, static_cast<int>(size))) return 0;

  static const peregrine::TrainingJob* const job = [] {
    auto parsed = peregrine::ParseTrainingJob(kJob);
    FUZZ_CHECK(parsed.ok());
    return new peregrine::TrainingJob(*std::move(parsed));
  }();
  peregrine::AgentRegistry registry("fuzz");
  registry.BindJob("default/j", peregrine::AgentRegistry::JobBinding{job->spec, ""});
  peregrine::AssignmentSpec assignment;
  assignment.slot = 0;
  assignment.attempt = 1;
  registry.SetDesired("default/j", {{"j-m0", peregrine::DesiredAgent{false, assignment}}});
  auto sink = std::make_shared<DiscardingSink>();
  peregrine::v1::Register reg;
  reg.set_job_namespace("default");
  reg.set_job_name("j");
  reg.set_pod_name("j-m0");
  reg.set_machine_id("local-0");
  reg.set_role(peregrine::v1::AGENT_ROLE_ACTIVE);
  reg.mutable_training()->set_attempt(1);
  reg.mutable_training()->set_phase(peregrine::v1::TRAINING_PHASE_RUNNING);
  FUZZ_CHECK(registry.OnRegister(sink, "", reg, 1).ok());

  (void)registry.OnMessage(sink.get(), message, 2);
  (void)registry.Observe("default/j");
  registry.OnDisconnect(sink.get(), 3);
  return 0;
}
