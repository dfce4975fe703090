// peregrine-gemm: computation validation (Falcon section 4.3): the GEMM throughput of this
// machine's accelerator, so that a slow GPU stands out against its peers.
//
// With a GPU (libcudart + libcublas loadable and cudaGetDeviceCount > 0) it times
// cublasGemmEx in fp16, bf16 and fp32 (fp32 accumulation) on every device or the one
// given; otherwise it says that CUDA is not available and times a cache-blocked CPU GEMM in
// fp32 and fp64. Each result is one JSON line:
//   {"device":"cpu"|"cuda:N","dtype":"fp32",...,"n":N,"seconds":S,"gflops":G,"max_error":E}
// --dtype fp16|bf16|fp32 times that type only (the CPU path times fp32 for any of them);
// --iterations N times exactly N GEMMs instead of filling --seconds.
// The CPU path is the stand-in GPU of the local cluster: its time is the thread's CPU time
// (robust to other load on the machine), and with a stand-in device plugged in (env
// PEREGRINE_STANDIN_DEVICE, standin_device.h) it is stretched (really: it sleeps the
// difference) by the compute_slowdown the stand-in reports for this GPU
// (PEREGRINE_MACHINE_ID, LOCAL_RANK); the line then says "standin":true, because that
// slowdown is the injected one (an oracle), not a measurement.
// Usage: peregrine-gemm [--n N] [--seconds S] [--iterations N] [--dtype T] [--device N] [--cpu]
// Exit code 0 on success, 2 on bad flags, 1 when a GEMM failed or gave a wrong result.
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "diagnosis/tools/standin_device.h"

namespace peregrine {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int n = 512;
  double seconds = 0.3;  // minimum timed duration per measurement
  int device = -1;       // -1: every device
  bool cpu = false;      // force the CPU path
  int iterations = 0;    // > 0: exactly this many GEMMs per measurement
  std::string dtype;     // empty: every type
};

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// This GPU's compute_slowdown from the stand-in device: 1 without one. A stand-in that is
// named but cannot be loaded is an error (the run would otherwise silently measure nothing
// of what was injected).
bool StandInSlowdown(double* slowdown, bool* standin, std::string* error) {
  *slowdown = 1.0;
  std::unique_ptr<StandInDevice> device = StandInDevice::FromEnv(error);
  *standin = device != nullptr;
  if (device == nullptr) return error->empty();
  int machine = -1, local_rank = -1;
  const char* m = std::getenv("PEREGRINE_MACHINE_ID");
  const char* r = std::getenv("LOCAL_RANK");
  if (m == nullptr || !absl::SimpleAtoi(m, &machine) || r == nullptr || !absl::SimpleAtoi(r, &local_rank)) {
    *error = "a stand-in device needs PEREGRINE_MACHINE_ID and LOCAL_RANK";
    return false;
  }
  *slowdown = device->Gpu(machine, local_rank).compute_slowdown;
  return true;
}

// ---- CPU -------------------------------------------------------------------------------

template <typename T>
void BlockedGemm(int n, const T* a, const T* b, T* c) {
  constexpr int kBlock = 64;
  std::fill(c, c + static_cast<size_t>(n) * n, T(0));
  for (int ii = 0; ii < n; ii += kBlock) {
    for (int kk = 0; kk < n; kk += kBlock) {
      for (int jj = 0; jj < n; jj += kBlock) {
        const int i_end = std::min(ii + kBlock, n), k_end = std::min(kk + kBlock, n), j_end = std::min(jj + kBlock, n);
        for (int i = ii; i < i_end; ++i) {
          T* ci = c + static_cast<size_t>(i) * n;
          for (int k = kk; k < k_end; ++k) {
            const T aik = a[static_cast<size_t>(i) * n + k];
            const T* bk = b + static_cast<size_t>(k) * n;
            for (int j = jj; j < j_end; ++j) ci[j] += aik * bk[j];
          }
        }
      }
    }
  }
}

template <typename T>
bool RunCpu(const Options& o, const char* dtype) {
  const int n = o.n;
  std::vector<T> a(static_cast<size_t>(n) * n), b(a.size()), c(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<T>(((i * 7919) % 1000) / 1000.0 - 0.5);
    b[i] = static_cast<T>(((i * 104729) % 1000) / 1000.0 - 0.5);
  }
  int reps = 0;
  const double start = ThreadCpuSeconds();
  double elapsed = 0;
  do {
    BlockedGemm(n, a.data(), b.data(), c.data());
    ++reps;
    elapsed = ThreadCpuSeconds() - start;
  } while (o.iterations > 0 ? reps < o.iterations : elapsed < o.seconds);
  double slowdown = 1.0;
  bool standin = false;
  if (std::string error; !StandInSlowdown(&slowdown, &standin, &error)) {
    std::fprintf(stderr, "peregrine-gemm: %s\n", error.c_str());
    return false;
  }
  if (slowdown > 1.0) {
    // The slowed device: it really takes that much longer.
    std::this_thread::sleep_for(std::chrono::duration<double>(elapsed * (slowdown - 1.0)));
    elapsed *= slowdown;
  }
  // Check a few entries against the plain dot product.
  double max_error = 0;
  for (int s = 0; s < 16; ++s) {
    const int i = (s * 37) % n, j = (s * 91) % n;
    double want = 0;
    for (int k = 0; k < n; ++k) want += static_cast<double>(a[static_cast<size_t>(i) * n + k]) * b[static_cast<size_t>(k) * n + j];
    max_error = std::max(max_error, std::fabs(want - static_cast<double>(c[static_cast<size_t>(i) * n + j])));
  }
  const double seconds = elapsed / reps;
  const double gflops = 2.0 * n * static_cast<double>(n) * n / seconds / 1e9;
  std::printf("%s\n", absl::StrFormat(R"({"device":"cpu","dtype":"%s","n":%d,"reps":%d,"seconds":%.6f,"gflops":%.3f,"max_error":%.3g,"compute_slowdown":%.3f,"standin":%s})",
                                      dtype, n, reps, seconds, gflops, max_error, slowdown, standin ? "true" : "false")
                          .c_str());
  std::fflush(stdout);
  const double tolerance = sizeof(T) == 4 ? 1e-2 : 1e-9;
  return max_error <= tolerance * n;
}

// ---- CUDA (loaded at run time) ----------------------------------------------------------

// The few cudart / cuBLAS entry points used, declared by their C ABI (no CUDA headers).
struct Cuda {
  void* cudart = nullptr;
  void* cublas = nullptr;
  int (*GetDeviceCount)(int*) = nullptr;
  int (*SetDevice)(int) = nullptr;
  int (*Malloc)(void**, size_t) = nullptr;
  int (*Free)(void*) = nullptr;
  int (*Memset)(void*, int, size_t) = nullptr;
  int (*DeviceSynchronize)() = nullptr;
  int (*Create)(void**) = nullptr;
  int (*Destroy)(void*) = nullptr;
  // cublasGemmEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta,
  //              C, Ctype, ldc, computeType, algo)
  int (*GemmEx)(void*, int, int, int, int, int, const void*, const void*, int, int, const void*, int, int,
                const void*, void*, int, int, int, int) = nullptr;
};

void* OpenFirst(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  return nullptr;
}

template <typename F>
bool Load(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

// Returns the number of devices, or 0 with `why` set when CUDA cannot be used.
int LoadCuda(Cuda* cuda, std::string* why) {
  cuda->cudart = OpenFirst({"libcudart.so", "libcudart.so.13", "libcudart.so.12"});
  if (cuda->cudart == nullptr) {
    *why = "libcudart.so not found";
    return 0;
  }
  if (!Load(cuda->cudart, "cudaGetDeviceCount", &cuda->GetDeviceCount) ||
      !Load(cuda->cudart, "cudaSetDevice", &cuda->SetDevice) || !Load(cuda->cudart, "cudaMalloc", &cuda->Malloc) ||
      !Load(cuda->cudart, "cudaFree", &cuda->Free) || !Load(cuda->cudart, "cudaMemset", &cuda->Memset) ||
      !Load(cuda->cudart, "cudaDeviceSynchronize", &cuda->DeviceSynchronize)) {
    *why = "libcudart.so lacks a CUDA runtime symbol";
    return 0;
  }
  int count = 0;
  if (int err = cuda->GetDeviceCount(&count); err != 0 || count <= 0) {
    *why = absl::StrFormat("cudaGetDeviceCount returned error %d, %d device(s)", err, count);
    return 0;
  }
  cuda->cublas = OpenFirst({"libcublas.so", "libcublas.so.13", "libcublas.so.12"});
  if (cuda->cublas == nullptr || !Load(cuda->cublas, "cublasCreate_v2", &cuda->Create) ||
      !Load(cuda->cublas, "cublasDestroy_v2", &cuda->Destroy) || !Load(cuda->cublas, "cublasGemmEx", &cuda->GemmEx)) {
    *why = "libcublas.so not found or incomplete";
    return 0;
  }
  return count;
}

constexpr int kCudaR16F = 2, kCudaR16BF = 14, kCudaR32F = 0;
constexpr int kComputeF32 = 68, kGemmDefault = -1, kOpN = 0;

bool RunCuda(Cuda& cuda, const Options& o, int device) {
  if (int err = cuda.SetDevice(device); err != 0) {
    std::fprintf(stderr, "peregrine-gemm: cudaSetDevice(%d) failed: %d\n", device, err);
    return false;
  }
  void* handle = nullptr;
  if (int err = cuda.Create(&handle); err != 0) {
    std::fprintf(stderr, "peregrine-gemm: cublasCreate failed on device %d: %d\n", device, err);
    return false;
  }
  const int n = o.n;
  const size_t bytes = static_cast<size_t>(n) * n * 4;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  bool ok = cuda.Malloc(&a, bytes) == 0 && cuda.Malloc(&b, bytes) == 0 && cuda.Malloc(&c, bytes) == 0;
  if (ok) ok = cuda.Memset(a, 0x3c, bytes) == 0 && cuda.Memset(b, 0x3c, bytes) == 0;  // small finite values
  const float alpha = 1.0f, beta = 0.0f;
  struct Type {
    const char* name;
    int cuda_type;
  };
  for (const Type& t : {Type{"fp16", kCudaR16F}, Type{"bf16", kCudaR16BF}, Type{"fp32", kCudaR32F}}) {
    if (!ok) break;
    if (!o.dtype.empty() && o.dtype != t.name) continue;
    auto gemm = [&] {
      return cuda.GemmEx(handle, kOpN, kOpN, n, n, n, &alpha, a, t.cuda_type, n, b, t.cuda_type, n, &beta, c,
                         t.cuda_type, n, kComputeF32, kGemmDefault);
    };
    if (int err = gemm(); err != 0 || cuda.DeviceSynchronize() != 0) {
      std::fprintf(stderr, "peregrine-gemm: cublasGemmEx %s failed on device %d: %d\n", t.name, device, err);
      ok = false;
      break;
    }
    int reps = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
      for (int i = 0; i < 10; ++i) ok = ok && gemm() == 0;
      ok = ok && cuda.DeviceSynchronize() == 0;
      reps += 10;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (ok && (o.iterations > 0 ? reps < o.iterations : elapsed < o.seconds));
    const double seconds = elapsed / reps;
    std::printf("%s\n", absl::StrFormat(R"({"device":"cuda:%d","dtype":"%s","n":%d,"reps":%d,"seconds":%.6f,"gflops":%.3f})",
                                        device, t.name, n, reps, seconds, 2.0 * n * double(n) * n / seconds / 1e9)
                            .c_str());
  }
  if (a) cuda.Free(a);
  if (b) cuda.Free(b);
  if (c) cuda.Free(c);
  cuda.Destroy(handle);
  return ok;
}

int Usage(const char* error) {
  std::fprintf(stderr, "peregrine-gemm: %s\nusage: peregrine-gemm [--n N] [--seconds S] [--iterations N] [--dtype fp16|bf16|fp32] [--device N] [--cpu]\n",
               error);
  return 2;
}

}  // namespace
}  // namespace peregrine

int main(int argc, char** argv) {
  using namespace peregrine;
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)name;
      return argv[++i];
    };
    if (arg == "--cpu") {
      o.cpu = true;
    } else if (arg == "--n") {
      const char* v = value("--n");
      if (v == nullptr || !absl::SimpleAtoi(v, &o.n) || o.n < 16 || o.n > 16384) return Usage("--n: 16..16384");
    } else if (arg == "--seconds") {
      const char* v = value("--seconds");
      if (v == nullptr || !absl::SimpleAtod(v, &o.seconds) || !(o.seconds >= 0)) return Usage("--seconds: >= 0");
    } else if (arg == "--iterations") {
      const char* v = value("--iterations");
      if (v == nullptr || !absl::SimpleAtoi(v, &o.iterations) || o.iterations < 1) return Usage("--iterations: >= 1");
    } else if (arg == "--dtype") {
      const char* v = value("--dtype");
      o.dtype = v == nullptr ? "" : v;
      if (o.dtype != "fp16" && o.dtype != "bf16" && o.dtype != "fp32") return Usage("--dtype: fp16, bf16 or fp32");
    } else if (arg == "--device") {
      const char* v = value("--device");
      if (v == nullptr || !absl::SimpleAtoi(v, &o.device) || o.device < 0) return Usage("--device: >= 0");
    } else {
      return Usage(("unknown argument " + arg).c_str());
    }
  }
  if (!o.cpu) {
    Cuda cuda;
    std::string why;
    const int devices = LoadCuda(&cuda, &why);
    if (devices > 0) {
      bool ok = true;
      for (int d = 0; d < devices; ++d) {
        if (o.device >= 0 && d != o.device) continue;
        ok = RunCuda(cuda, o, d) && ok;
      }
      return ok ? 0 : 1;
    }
    std::printf("{\"cuda\":\"not available: %s\",\"fallback\":\"cpu\"}\n", why.c_str());
  }
  const bool ok = o.dtype.empty() ? (RunCpu<float>(o, "fp32") & RunCpu<double>(o, "fp64")) : RunCpu<float>(o, "fp32");
  return ok ? 0 : 1;
}
