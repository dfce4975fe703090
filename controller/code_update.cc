#include "controller/code_update.h"

namespace peregrine {

TrainingJob ApplyCodeUpdate(TrainingJob job, const CodeUpdateRequest& request) {
  job.spec.code.revision = request.revision;
  if (request.image) job.spec.code.image = *request.image;
  if (request.command) job.spec.code.command = *request.command;
  if (request.urgent) {
    job.metadata.annotations[kHotUpdateAnnotation] = "urgent";
  } else {
    job.metadata.annotations.erase(kHotUpdateAnnotation);
  }
  return job;
}

}  // namespace peregrine
