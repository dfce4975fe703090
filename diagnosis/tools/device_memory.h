// Device memory for the NCCL validation tools (peregrine-nccl-check, peregrine-linkcheck)
// when they run on a real GPU with a real NCCL: the CUDA runtime is loaded at run time
// (dlopen libcudart), never linked, so the same binaries run on machines without CUDA.
//
// DeviceMemory::Open decides where buffers live:
//   --device-buffers off   host memory (the stand-in NCCL of the local cluster);
//   --device-buffers on    device LOCAL_RANK, or an error when CUDA cannot be used;
//   --device-buffers auto  (default) device memory when libcudart loads, a device exists,
//                          no stand-in device is plugged in (env PEREGRINE_STANDIN_DEVICE) and the libnccl in use is not
//                          the stand-in (whose NCCL works on host memory; it is recognised by
//                          living in a "sim" directory, as the build puts it); host memory
//                          otherwise.
// Buffers are then handled through Alloc/ToDevice/ToHost/Synchronize, which are plain
// memcpy on host memory.
//
// Thread-compatible; one per process. Header-only (each tool is one translation unit).
#ifndef PEREGRINE_DIAGNOSIS_TOOLS_DEVICE_MEMORY_H_
#define PEREGRINE_DIAGNOSIS_TOOLS_DEVICE_MEMORY_H_

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace peregrine {

class DeviceMemory {
 public:
  // nullptr with *error set when mode is "on" (or not one of on/off/auto) and CUDA cannot
  // be used; otherwise a DeviceMemory on the device `device` or on the host.
  // `nccl_symbol`: any function of the libnccl in use (to tell the stand-in apart).
  static std::unique_ptr<DeviceMemory> Open(const std::string& mode, int device, const void* nccl_symbol,
                                            std::string* error) {
    auto m = std::unique_ptr<DeviceMemory>(new DeviceMemory());
    if (mode == "off") return m;
    if (mode != "on" && mode != "auto") {
      *error = "--device-buffers: expected on, off or auto, got " + mode;
      return nullptr;
    }
    const char* sim = std::getenv("PEREGRINE_STANDIN_DEVICE");
    if (mode == "auto" && sim != nullptr && *sim != '\0') return m;
    Dl_info info{};
    if (mode == "auto" && dladdr(nccl_symbol, &info) != 0 && info.dli_fname != nullptr &&
        std::string(info.dli_fname).find("/sim/") != std::string::npos) {
      return m;
    }
    std::string why;
    if (!m->LoadCuda(device, &why)) {
      if (mode == "on") {
        *error = "--device-buffers on: " + why;
        return nullptr;
      }
      return m;
    }
    return m;
  }

  ~DeviceMemory() {
    for (void* p : allocations_) free_(p);
  }

  bool on_device() const { return on_device_; }

  // `bytes` of buffer (zeroed), or nullptr.
  void* Alloc(size_t bytes) {
    if (!on_device_) {
      host_.emplace_back(bytes, 0);
      return host_.back().data();
    }
    void* p = nullptr;
    if (malloc_(&p, bytes) != 0) return nullptr;
    allocations_.push_back(p);
    if (memset_(p, 0, bytes) != 0) return nullptr;
    return p;
  }
  bool ToDevice(void* dst, const void* src, size_t bytes) {
    if (!on_device_) {
      std::memcpy(dst, src, bytes);
      return true;
    }
    return memcpy_(dst, src, bytes, kHostToDevice) == 0;
  }
  bool ToHost(void* dst, const void* src, size_t bytes) {
    if (!on_device_) {
      std::memcpy(dst, src, bytes);
      return true;
    }
    return memcpy_(dst, src, bytes, kDeviceToHost) == 0;
  }
  // Waits for the device (NCCL calls are asynchronous on a real GPU).
  bool Synchronize() { return !on_device_ || synchronize_() == 0; }

 private:
  static constexpr int kHostToDevice = 1, kDeviceToHost = 2;

  DeviceMemory() = default;

  template <typename F>
  bool Sym(void* lib, const char* name, F* out) {
    *out = reinterpret_cast<F>(dlsym(lib, name));
    return *out != nullptr;
  }

  bool LoadCuda(int device, std::string* why) {
    void* lib = nullptr;
    for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12"}) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    }
    if (lib == nullptr) {
      *why = "libcudart.so not found";
      return false;
    }
    int (*count_fn)(int*) = nullptr;
    int (*set_fn)(int) = nullptr;
    if (!Sym(lib, "cudaGetDeviceCount", &count_fn) || !Sym(lib, "cudaSetDevice", &set_fn) ||
        !Sym(lib, "cudaMalloc", &malloc_) || !Sym(lib, "cudaFree", &free_) || !Sym(lib, "cudaMemset", &memset_) ||
        !Sym(lib, "cudaMemcpy", &memcpy_) || !Sym(lib, "cudaDeviceSynchronize", &synchronize_)) {
      *why = "libcudart.so lacks a CUDA runtime symbol";
      return false;
    }
    int count = 0;
    if (count_fn(&count) != 0 || count <= 0) {
      *why = "no CUDA device";
      return false;
    }
    if (device < 0 || device >= count || set_fn(device) != 0) {
      *why = "cannot select CUDA device " + std::to_string(device) + " of " + std::to_string(count);
      return false;
    }
    on_device_ = true;
    return true;
  }

  bool on_device_ = false;
  std::vector<std::vector<char>> host_;
  std::vector<void*> allocations_;
  int (*malloc_)(void**, size_t) = nullptr;
  int (*free_)(void*) = nullptr;
  int (*memset_)(void*, int, size_t) = nullptr;
  int (*memcpy_)(void*, const void*, size_t, int) = nullptr;
  int (*synchronize_)() = nullptr;
};

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_TOOLS_DEVICE_MEMORY_H_
