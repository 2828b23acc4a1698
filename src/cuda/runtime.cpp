// The CUDA runtime behind include/shardex/device/cuda/runtime.hpp.
#include "shardex/device/cuda/runtime.hpp"

#include <cublas_v2.h>

#include <mutex>
#include <string>
#include <vector>

#include "shardex/core/error.hpp"

namespace shardex::cuda {

void check(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  throw backend_error(std::string(what) + " failed: " + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc),
                      static_cast<int>(rc));
}

std::string no_gpu_reason() {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error so a later query is not poisoned
    return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")";
  }
  if (n == 0) return "cudaGetDeviceCount found no CUDA device";
  return {};
}

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

void set_device(int device) { check(cudaSetDevice(device), "cudaSetDevice"); }

namespace {

int current_device() {
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

/// Per-device resources, made on first use and kept for the life of the
/// process (destroying them at exit would race the driver's own teardown).
struct PerDevice {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
};

PerDevice& resources(int device) {
  static std::mutex mutex;
  static std::vector<PerDevice> all;
  std::lock_guard<std::mutex> lock(mutex);
  if (all.size() <= static_cast<std::size_t>(device)) all.resize(static_cast<std::size_t>(device) + 1);
  return all[static_cast<std::size_t>(device)];
}

}  // namespace

cudaStream_t compute_stream() {
  PerDevice& r = resources(current_device());
  if (!r.stream) check(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return r.stream;
}

void synchronize() { check(cudaStreamSynchronize(compute_stream()), "cudaStreamSynchronize (compute stream)"); }

void copy_to_device(void* dst, const void* src, std::int64_t bytes) {
  if (bytes <= 0) return;
  check(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes), cudaMemcpyHostToDevice, compute_stream()),
        "cudaMemcpyAsync (host to device)");
  synchronize();  // the host buffer may be freed as soon as we return
}

void copy_to_host(void* dst, const void* src, std::int64_t bytes) {
  if (bytes <= 0) return;
  check(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes), cudaMemcpyDeviceToHost, compute_stream()),
        "cudaMemcpyAsync (device to host)");
  synchronize();
}

void* blas_handle() {
  cudaStream_t s = compute_stream();
  PerDevice& r = resources(current_device());
  if (!r.blas) {
    const cublasStatus_t st = cublasCreate(&r.blas);
    if (st != CUBLAS_STATUS_SUCCESS)
      throw backend_error(std::string("cublasCreate failed: ") + cublasGetStatusString(st), static_cast<int>(st));
    const cublasStatus_t ss = cublasSetStream(r.blas, s);
    if (ss != CUBLAS_STATUS_SUCCESS)
      throw backend_error(std::string("cublasSetStream failed: ") + cublasGetStatusString(ss), static_cast<int>(ss));
  }
  return r.blas;
}

}  // namespace shardex::cuda
