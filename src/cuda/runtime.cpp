// SPDX-License-Identifier: MIT
// The CUDA runtime behind include/shardex/device/cuda/runtime.hpp.
#include "shardex/device/cuda/runtime.hpp"

#include <cublas_v2.h>

#include <deque>
#include <mutex>
#include <string>

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

/// Per-device resources, made on first use under one lock and kept for the
/// life of the process (destroying them at exit would race the driver's own
/// teardown). A deque: growing it never moves the entries handed out.
struct PerDevice {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  std::size_t max_pitch = 0;
};

std::mutex& resources_mutex() {
  static std::mutex m;
  return m;
}

/// The current device's entry; the caller holds resources_mutex().
PerDevice& resources_locked(int device) {
  static std::deque<PerDevice> all;
  if (all.size() <= static_cast<std::size_t>(device)) all.resize(static_cast<std::size_t>(device) + 1);
  return all[static_cast<std::size_t>(device)];
}

}  // namespace

cudaStream_t compute_stream() {
  const int device = current_device();
  std::lock_guard<std::mutex> lock(resources_mutex());
  PerDevice& r = resources_locked(device);
  if (!r.stream) check(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return r.stream;
}

std::size_t max_pitch() {
  const int device = current_device();
  std::lock_guard<std::mutex> lock(resources_mutex());
  PerDevice& r = resources_locked(device);
  if (r.max_pitch == 0) {
    int v = 0;
    check(cudaDeviceGetAttribute(&v, cudaDevAttrMaxPitch, device), "cudaDeviceGetAttribute (cudaDevAttrMaxPitch)");
    r.max_pitch = static_cast<std::size_t>(v);
  }
  return r.max_pitch;
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
  const int device = current_device();
  std::lock_guard<std::mutex> lock(resources_mutex());
  PerDevice& r = resources_locked(device);
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
