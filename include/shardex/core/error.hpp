// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief The exceptions shardex throws. Every message names the operation,
/// the rank(s) and the shapes involved, so that a failure on rank 3 of 64 can be
/// understood from one log line.

#include <stdexcept>
#include <string>

namespace shardex {

/// Base of every shardex exception.
class error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Bad input to an operation: wrong lengths, a local extent that is not
/// lengths[rank], a sharded dim out of range. Thrown on *every* rank when any
/// rank's input is bad, so that no rank is left waiting in a collective.
class invalid_argument : public error {
public:
  using error::error;
};

/// A communication backend (MPI, NCCL, CUDA) reported an error.
/// `code()` is the backend's own error code.
class backend_error : public error {
public:
  /// The message and the backend's error code.
  backend_error(std::string what, int code) : error(std::move(what)), code_(code) {}
  /// The backend's own error code (an MPI, NCCL or CUDA error value).
  [[nodiscard]] int code() const noexcept { return code_; }

private:
  int code_;
};

}  // namespace shardex
