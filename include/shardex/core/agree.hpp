// SPDX-License-Identifier: MIT
#pragma once
/// @file
/// @brief Cross-rank agreement before a collective: the mechanism behind "a bad
/// input is an exception on every rank, never a hang" (core/checks.hpp).
// IWYU pragma: private

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardex/core/checks.hpp"
#include "shardex/core/counters.hpp"
#include "shardex/core/error.hpp"

namespace shardex::detail {

/// FNV-1a over the facts that must be equal on all ranks for a call to match.
class Signature {
public:
  Signature& add(std::int64_t v) {
    for (int i = 0; i < 8; ++i) mix(static_cast<unsigned char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xffu));
    return *this;
  }
  Signature& add(std::string_view s) {
    for (char c : s) mix(static_cast<unsigned char>(c));
    return add(static_cast<std::int64_t>(s.size()));
  }
  /// 62 bits, so that it and its negation fit an int64 min-reduction.
  [[nodiscard]] std::int64_t value() const { return static_cast<std::int64_t>(h_ >> 2); }

private:
  void mix(unsigned char b) { h_ = (h_ ^ b) * 1099511628211ull; }
  std::uint64_t h_ = 1469598103934665603ull;
};

/// The host communicator of `comm`: itself for MPI, the bootstrap (control)
/// communicator for a device backend such as NCCL, whose own calls take
/// device memory. The cross-rank checks are small host messages.
template <class Comm>
const auto& control_of(const Comm& comm) {
  if constexpr (requires { comm.control(); })
    return comm.control();
  else
    return comm;
}

/// The calls of a plan whose ranks already agreed on all of it at once
/// (`backward` agrees on its whole pass): while one lives on this thread,
/// `agree` only throws a rank's own error and does not communicate.
class AgreedPlan {
public:
  AgreedPlan() noexcept { ++depth(); }
  AgreedPlan(const AgreedPlan&) = delete;
  AgreedPlan& operator=(const AgreedPlan&) = delete;
  ~AgreedPlan() { --depth(); }
  static bool active() noexcept { return depth() > 0; }

private:
  static int& depth() noexcept {
    static thread_local int d = 0;
    return d;
  }
};

/// The text of a call for an error message: a string, or a function making it
/// (so that the text is only built when an error needs it).
template <class Describe>
std::string call_text(const Describe& d) {
  if constexpr (std::invocable<const Describe&>)
    return d();
  else
    return std::string(d);
}

/// The ranks grouped by the call they make, in rank order: "rank 0 | ranks 1, 2".
inline std::string rank_groups(const std::vector<std::int64_t>& sigs) {
  std::string out;
  std::vector<bool> done(sigs.size(), false);
  for (std::size_t r = 0; r < sigs.size(); ++r) {
    if (done[r]) continue;
    std::string members;
    int count = 0;
    for (std::size_t q = r; q < sigs.size(); ++q)
      if (!done[q] && sigs[q] == sigs[r]) {
        done[q] = true;
        members += (count++ ? ", " : "") + std::to_string(q);
      }
    out += (out.empty() ? "" : " | ") + std::string(count == 1 ? "rank " : "ranks ") + members;
  }
  return out;
}

/// Collective on `comm` whatever the check level: the first bad rank's
/// `local_error` on every rank (empty when no rank has one), and whether the
/// ranks' `signature`s differ. One small all-reduce, plus two broadcasts on
/// the error path only. `agree` is built on it; file operations, which must
/// agree even under CheckLevel::local, call it directly.
template <class HostComm>
std::string first_error(const HostComm& comm, const std::string& local_error, std::int64_t signature,
                        bool& signatures_differ) {
  std::int64_t v[3] = {local_error.empty() ? comm.size() : comm.rank(), signature, -signature};
  comm.all_reduce_min(v, 3);
  signatures_differ = v[1] != -v[2];
  if (v[0] == comm.size()) return {};
  const int bad = static_cast<int>(v[0]);
  std::string msg = local_error;
  std::int64_t len = static_cast<std::int64_t>(msg.size());
  comm.broadcast(&len, 1, bad);
  msg.resize(static_cast<std::size_t>(len));
  comm.broadcast(msg.data(), len, bad);
  if (comm.rank() != bad)
    msg += " (reported by rank " + std::to_string(bad) + "; this is rank " + std::to_string(comm.rank()) + ")";
  return msg;
}

/// Every rank calls this with its own verdict (`local_error` empty when its
/// input is fine) and the signature of its call. If any rank's input is bad,
/// all ranks throw `invalid_argument` with the first bad rank's message; if the
/// signatures differ, all ranks throw, each describing its own call (`call`:
/// its text, or a function returning it).
template <class Comm, class Describe>
void agree(const Comm& device_comm, const std::string& local_error, const Signature& sig, const Describe& call) {
  const auto& comm = control_of(device_comm);
  if (check_level() == CheckLevel::local || comm.size() == 1 || AgreedPlan::active()) {
    if (!local_error.empty()) throw invalid_argument(local_error);
    return;
  }
  ++counters_ref().agreements;
  bool signatures_differ = false;
  if (std::string msg = first_error(comm, local_error, sig.value(), signatures_differ); !msg.empty())
    throw invalid_argument(msg);
  if (signatures_differ) {
    // Name the ranks out of step: one more collective, on the error path
    // only (every rank is here, in this agreement).
    std::vector<std::int64_t> sigs(static_cast<std::size_t>(comm.size()));
    const std::int64_t mine = sig.value();
    comm.all_gather(&mine, sigs.data(), 1);
    throw invalid_argument(
        call_text(call) + " on rank " + std::to_string(comm.rank()) +
        ": the ranks are not making the same call (operation, dtype, shapes or lengths differ across "
        "ranks; the ranks by the call they make: " +
        rank_groups(sigs) + "); every rank must call the same collectives in the same order");
  }
}

}  // namespace shardex::detail
