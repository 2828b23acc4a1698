// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The pieces of the CUDA runtime shardex uses, behind functions that
/// throw `backend_error` with CUDA's own message: GPU discovery (and why there
/// is none), the compute stream, the cuBLAS handle, host <-> device copies.
///
/// One compute stream per process and device: every kernel, copy and cuBLAS
/// call of the Cuda device is ordered on it. Each NCCL communicator has its
/// own stream and orders itself after the compute stream with an event
/// (backend/nccl/communicator.hpp).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace shardex::cuda {

/// Throws backend_error("<what> failed: <CUDA error name>: <CUDA message>") unless rc is cudaSuccess.
void check(cudaError_t rc, const char* what);

/// Empty when this process can use a GPU; otherwise why not (CUDA's error from
/// cudaGetDeviceCount, e.g. no driver, or "no CUDA device is visible").
std::string no_gpu_reason();

/// The number of visible GPUs (0 when there is no usable GPU).
int device_count() noexcept;

/// Makes `device` current for this process (before any allocation).
void set_device(int device);

/// The compute stream of the current device (created on first use, non-blocking).
cudaStream_t compute_stream();

/// The largest pitch, in bytes, that cudaMemcpy2D accepts on the current device.
std::size_t max_pitch();

/// Waits for everything queued on the compute stream.
void synchronize();

/// Copies between host and device memory, ordered on the compute stream;
/// `to_host` returns when the data has arrived.
void copy_to_device(void* dst, const void* src, std::int64_t bytes);
/// The device -> host copy (returns when the data has arrived).
void copy_to_host(void* dst, const void* src, std::int64_t bytes);

/// The cuBLAS handle of the current device, bound to the compute stream
/// (an opaque pointer: users of this header need no cuBLAS header).
void* blas_handle();

}  // namespace shardex::cuda
