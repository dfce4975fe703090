// The stand-in device: how the validation tools (peregrine-gemm) and the agent's GPU
// self-test (EUD) run in the local cluster, where there is no GPU. Product code knows
// only this interface; the local mode plugs an implementation in by naming a shared
// library in env PEREGRINE_STANDIN_DEVICE (the stand-in cluster's, built from sim/, which
// plays the faults injected into its fault table). Without that variable there is no
// stand-in and the tools use the real device or report that none is present.
//
// A stand-in is an ORACLE: it knows the injected fault. Everything measured through it
// must say so where it is printed (the tools label such results "stand-in").
//
// The library exports one C function:
//   int peregrine_standin_gpu(int machine, int local_rank, PeregrineStandInGpu* out);
// which fills *out with what the stand-in GPU `local_rank` of machine `machine` does now
// and returns 0 (nonzero: no answer; the caller treats the GPU as healthy).
//
// Header-only (each tool is one translation unit). StandInDevice is thread-safe.
#ifndef PEREGRINE_DIAGNOSIS_TOOLS_STANDIN_DEVICE_H_
#define PEREGRINE_DIAGNOSIS_TOOLS_STANDIN_DEVICE_H_

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <string>

extern "C" {
// What a stand-in GPU does now (the default value: a healthy GPU).
struct PeregrineStandInGpu {
  double compute_slowdown;  // >= 1: its compute takes this many times longer
  int hang;                 // nonzero: its kernels never finish
  int crash;                // nonzero: its kernels abort
  int nan;                  // nonzero: its results are NaN
  int corrupt;              // nonzero: its results are silently wrong
};
typedef int (*PeregrineStandInGpuFn)(int machine, int local_rank, PeregrineStandInGpu* out);
}

namespace peregrine {

inline constexpr char kStandInDeviceEnv[] = "PEREGRINE_STANDIN_DEVICE";

// True when a stand-in device is plugged in (env PEREGRINE_STANDIN_DEVICE set).
inline bool StandInDevicePluggedIn() {
  const char* path = std::getenv(kStandInDeviceEnv);
  return path != nullptr && *path != '\0';
}

class StandInDevice {
 public:
  // The stand-in named by `library_path`; nullptr with *error set when the library cannot
  // be loaded or lacks peregrine_standin_gpu.
  static std::unique_ptr<StandInDevice> Load(const std::string& library_path, std::string* error) {
    void* handle = dlopen(library_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      *error = "stand-in device " + library_path + ": " + (why != nullptr ? why : "cannot load");
      return nullptr;
    }
    auto fn = reinterpret_cast<PeregrineStandInGpuFn>(dlsym(handle, "peregrine_standin_gpu"));
    if (fn == nullptr) {
      dlclose(handle);
      *error = "stand-in device " + library_path + ": no symbol peregrine_standin_gpu";
      return nullptr;
    }
    return std::unique_ptr<StandInDevice>(new StandInDevice(handle, fn));
  }
  // The stand-in of env PEREGRINE_STANDIN_DEVICE: nullptr with *error empty when the
  // variable is unset, nullptr with *error set when it cannot be loaded.
  static std::unique_ptr<StandInDevice> FromEnv(std::string* error) {
    error->clear();
    if (!StandInDevicePluggedIn()) return nullptr;
    return Load(std::getenv(kStandInDeviceEnv), error);
  }
  ~StandInDevice() { dlclose(handle_); }
  StandInDevice(const StandInDevice&) = delete;
  StandInDevice& operator=(const StandInDevice&) = delete;

  // What GPU `local_rank` of `machine` does now; a healthy GPU when the stand-in has no answer.
  PeregrineStandInGpu Gpu(int machine, int local_rank) const {
    PeregrineStandInGpu out{1.0, 0, 0, 0, 0};
    if (fn_(machine, local_rank, &out) != 0) out = PeregrineStandInGpu{1.0, 0, 0, 0, 0};
    if (!(out.compute_slowdown >= 1.0)) out.compute_slowdown = 1.0;
    return out;
  }

 private:
  StandInDevice(void* handle, PeregrineStandInGpuFn fn) : handle_(handle), fn_(fn) {}
  void* handle_;
  PeregrineStandInGpuFn fn_;
};

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_TOOLS_STANDIN_DEVICE_H_
