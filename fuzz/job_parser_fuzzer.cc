// Fuzzes ParseTrainingJob (controller/job_parser.h): TrainingJob YAML or JSON text from
// users (peregrine-controller --local JOB.yaml) and from the Kubernetes API. Any input
// must give a job or a clear error; a parsed job must pass or fail ValidateTrainingJob
// without crashing.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "controller/job_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto job = peregrine::ParseTrainingJob(text);
  if (job.ok()) (void)peregrine::ValidateTrainingJob(*job);
  return 0;
}
