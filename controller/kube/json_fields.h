// Reading fields of Kubernetes objects held as nlohmann::json, without exceptions: the
// helpers every part of the Kubernetes side uses to look into pods, nodes and
// TrainingJobs. Pure; thread-safe.
#ifndef PEREGRINE_CONTROLLER_KUBE_JSON_FIELDS_H_
#define PEREGRINE_CONTROLLER_KUBE_JSON_FIELDS_H_

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

namespace peregrine::kube {

// j[key] when it is a string, else "".
inline std::string Str(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// The value at j[k0][k1]..., or nullptr when a key is missing or a step is not an object.
inline const nlohmann::json* Path(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  const nlohmann::json* cur = &j;
  for (const char* k : keys) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(k);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

}  // namespace peregrine::kube

#endif  // PEREGRINE_CONTROLLER_KUBE_JSON_FIELDS_H_
