// Inspection: one kind of real-time machine check (GPU, kernel log, network, host) that
// the Inspector runs at its own interval. Implementations keep whatever state they need
// between runs (open files, counter history) and take the time from the caller.
// Not thread-safe; the Inspector calls Run from one thread.
#ifndef PEREGRINE_AGENT_INSPECTION_INSPECTION_H_
#define PEREGRINE_AGENT_INSPECTION_INSPECTION_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/inspection/inspection_result.h"

namespace peregrine {

class Inspection {
 public:
  virtual ~Inspection() = default;
  virtual std::string kind() const = 0;
  // Inspects once and returns one result per component (never empty: a missing device
  // is a NOT_PRESENT result, a failed read an ERROR result). Results carry observed_at =
  // now.
  virtual std::vector<InspectionResult> Run(absl::Time now) = 0;
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_INSPECTION_INSPECTION_H_
