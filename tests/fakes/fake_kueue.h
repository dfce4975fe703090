// Kueue on the fake API server: what an installed Kueue serves and does, for the tests of
// Peregrine's Kueue integration (controller/kube/kueue_gate.h).
//
// ServeKueue registers the kueue.x-k8s.io/v1beta1 custom resources Peregrine uses, as
// Kueue's CRDs define them: workloads (namespaced, with a status subresource) and
// resourceflavors (cluster-scoped). A server without ServeKueue answers 404 for them, as
// an API server without Kueue does. The other functions play Kueue's controllers through
// the server's test hooks (one write each, as another client would make it): admitting a
// Workload (status.admission with one podSetAssignment per spec.podSets entry naming the
// flavor for every resource its containers request, QuotaReserved=True, Admitted=True,
// Evicted=False when it was evicted before, as Kueue's scheduler does on re-admission),
// evicting it (Evicted=True with the reason, and Preempted=True for a preemption), and
// creating ResourceFlavors. Not modelled: quota, queues, admission checks, webhooks.
//
// Thread-safe as the server is.
#ifndef PEREGRINE_TESTS_FAKES_FAKE_KUEUE_H_
#define PEREGRINE_TESTS_FAKES_FAKE_KUEUE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tests/fakes/fake_kube_api_server.h"

namespace peregrine::testing {

inline constexpr char kFakeWorkloads[] = "workloads.kueue.x-k8s.io";
inline constexpr char kFakeResourceFlavors[] = "resourceflavors.kueue.x-k8s.io";

void ServeKueue(FakeKubeApiServer& server);

// A ResourceFlavor with these spec.nodeLabels and spec.tolerations.
absl::StatusOr<nlohmann::json> CreateResourceFlavor(FakeKubeApiServer& server, const std::string& name,
                                                    const std::map<std::string, std::string>& node_labels,
                                                    const std::vector<nlohmann::json>& tolerations);

// Admits the Workload through `cluster_queue`, every pod set on `flavor`.
absl::Status AdmitWorkload(FakeKubeApiServer& server, const std::string& ns, const std::string& name,
                           const std::string& cluster_queue, const std::string& flavor);

// Evicts the Workload: Evicted=True with `reason` ("Preempted", "ClusterQueueStopped", ...)
// and `message`.
absl::Status EvictWorkload(FakeKubeApiServer& server, const std::string& ns, const std::string& name,
                           const std::string& reason, const std::string& message);

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_FAKES_FAKE_KUEUE_H_
