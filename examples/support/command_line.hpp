// SPDX-License-Identifier: MIT
#pragma once
// The command line of every example and bench program, in one place: the flags
// are declared with CLI11 (<CLI/CLI.hpp>, Debian's libcli11-dev) and parsed on
// every rank (mpirun gives every rank the same arguments, so the ranks agree
// without talking); rank 0 alone prints --help and the errors, and every rank
// exits with the same code (mpirun returns the first non-zero one). The flags,
// the exit codes and the bad inputs test/cli checks are listed in
// docs/guides/command-lines.md.
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace command_line {

/// How an example or bench program ends. The tests check these exact codes
/// (test/meson.build, test/cli), so that a test that expects one failure does
/// not pass on another one (a renamed flag, say).
enum class exit_code : int {
  ok = 0,
  error = 1,          ///< any other error (from shardex, MPI, a file), printed by the rank that met it
  differs = 3,        ///< the sharded run differs from the unsharded one beyond the tolerance
  did_not_learn = 4,  ///< the loss did not go down from the first pass over the batches to the last
  diverged = 5,       ///< the loss stopped being finite
  refused = 6,  ///< a configuration the program cannot run: a mesh that does not fit the world, a wrong world size
  usage = 64,   ///< a bad command line (EX_USAGE of <sysexits.h>)
  skip = 77,    ///< nothing to measure or run on this machine (no usable GPU): Meson's SKIP
};

constexpr int as_int(exit_code c) noexcept { return static_cast<int>(c); }

/// An error every rank meets alike (the same flags, the same loss, the same
/// world), so rank 0 alone prints it; every rank exits with its code.
class failure : public std::runtime_error {
public:
  failure(exit_code code, const std::string& what) : std::runtime_error(what), code_(code) {}
  [[nodiscard]] exit_code code() const noexcept { return code_; }

private:
  exit_code code_;
};

/// A bad command line found after parsing (flags that contradict each other).
struct usage_error : failure {
  explicit usage_error(const std::string& what) : failure(exit_code::usage, what) {}
};

/// A loss that stopped being finite (the same on every rank: the loss is Invariant).
struct diverged : failure {
  explicit diverged(const std::string& what) : failure(exit_code::diverged, what) {}
};

/// A configuration the program refuses on every rank (a mesh that does not fit the world).
struct refused : failure {
  explicit refused(const std::string& what) : failure(exit_code::refused, what) {}
};

// ---- values: stricter than CLI11's own conversions ----
//
// CLI11 2.1 converts integers with strtoll in base 0 ("010" is 8, "0x10" is 16)
// and keeps a value beyond the type's range clamped; these validators accept
// decimal numbers only, refuse out-of-range ones and infinities, and (integers)
// hand CLI11 the canonical decimal string, which it then reads as meant.

/// Reads a whole decimal integer; nothing if `s` is not one. `out_of_range` is
/// set for one that does not fit in 64 bits.
inline std::optional<std::int64_t> read_integer(const std::string& s, bool* out_of_range = nullptr) {
  std::int64_t v = 0;
  const char* end = s.data() + s.size();
  const auto [stop, ec] = std::from_chars(s.data(), end, v);
  if (out_of_range) *out_of_range = ec == std::errc::result_out_of_range && stop == end;
  if (ec != std::errc() || stop != end) return std::nullopt;
  return v;
}

/// Reads a whole finite decimal number; nothing if `s` is not one.
inline std::optional<double> read_real(const std::string& s) {
  double v = 0;
  const char* end = s.data() + s.size();
  const auto [stop, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc() || stop != end || !std::isfinite(v)) return std::nullopt;
  return v;
}

/// An integer flag in [lo, hi]: "INT>=lo" or "INT lo..hi" in --help.
inline CLI::Validator integer(std::int64_t lo, std::int64_t hi = std::numeric_limits<std::int64_t>::max()) {
  const std::string desc = hi == std::numeric_limits<std::int64_t>::max()
                               ? "INT>=" + std::to_string(lo)
                               : "INT " + std::to_string(lo) + ".." + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, desc](std::string& s) -> std::string {
        bool huge = false;
        const auto v = read_integer(s, &huge);
        if (huge) return "'" + s + "' is out of range (" + desc + ")";
        if (!v) return "'" + s + "' is not a whole number (" + desc + ")";
        if (*v < lo || *v > hi) return s + " is out of range (" + desc + ")";
        s = std::to_string(*v);
        return {};
      },
      desc, "INTEGER");
}

/// A real flag > lo (`open`) or >= lo: "NUMBER>lo" in --help.
inline CLI::Validator real(double lo, bool open) {
  std::ostringstream d;
  d << "NUMBER" << (open ? ">" : ">=") << lo;
  const std::string desc = d.str();
  return CLI::Validator(
      [lo, open, desc](std::string& s) -> std::string {
        const auto v = read_real(s);
        if (!v) return "'" + s + "' is not a finite number (" + desc + ")";
        if (open ? !(*v > lo) : !(*v >= lo)) return s + " is out of range (" + desc + ")";
        return {};
      },
      desc, "REAL");
}

/// Splits "a,b,c" at `sep` (an empty string gives no items; "a,,b" an empty middle one).
inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  for (std::size_t pos = 0;;) {
    const std::size_t next = s.find(sep, pos);
    out.push_back(s.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) return out;
    pos = next + 1;
  }
}

/// Relative speeds (weights): `count` (0: any number) finite numbers >= 0
/// separated by `sep`, at least one of them > 0; an error message, or empty.
inline std::string check_weights(const std::string& s, std::size_t count, char sep = ',') {
  const auto items = split(s, sep);
  bool positive = false;
  for (const auto& item : items) {
    const auto v = read_real(item);
    if (!v || *v < 0) return "'" + item + "' in '" + s + "' is not a number >= 0";
    positive = positive || *v > 0;
  }
  if (!positive) return "'" + s + "' gives no rank anything: at least one weight must be > 0";
  if (count != 0 && items.size() != count)
    return "'" + s + "' gives " + std::to_string(items.size()) + " weights for " + std::to_string(count) +
           (count == 1 ? " rank" : " ranks") + ": give one per rank";
  return {};
}

/// The numbers of a list check_weights accepted.
inline std::vector<double> weights(const std::string& s, char sep = ',') {
  std::vector<double> w;
  for (const auto& item : split(s, sep)) w.push_back(*read_real(item));
  return w;
}

// ---- parsing and ending ----

/// --help with each option's accepted values and default as
/// "--steps INT>=0 [20]" (CLI11's own "INT:INT>=0=20" names the type twice).
class Formatter : public CLI::Formatter {
public:
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_type_size() == 0) return {};  // --help
    std::string type = opt->get_type_name();   // "INT:INT>=0": the C++ type, then each validator's description
    if (const auto colon = type.find(':'); colon != std::string::npos) type = type.substr(colon + 1);
    std::string out = " " + type;
    const std::string d = opt->get_default_str();  // a list's comes in brackets already
    if (!d.empty()) out += d.front() == '[' ? " " + d : " [" + d + "]";
    return out;
  }
};

/// Sets up a program's CLI11 app: the help format above, and an option given
/// twice keeps its last value (as `--steps 5 --steps 8` always did here).
inline void configure(CLI::App& app) {
  app.formatter(std::make_shared<Formatter>());
  app.get_formatter()->column_width(36);
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

/// Writes `message` and a newline to stderr in one write: the ranks of a job
/// share the terminal, and a message written a piece at a time (std::cerr is
/// unbuffered) interleaved with another rank's ("gpt2gpt2 (rank 1): ...").
inline void print_error(const std::string& message) {
  const std::string line = message + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

/// Parses the command line with `app` on every rank. Returns the code to exit
/// with now (0 after --help, 64 after a bad command line; rank 0 alone prints
/// either), or nothing to go on.
inline std::optional<int> parse(CLI::App& app, int argc, char** argv, int rank) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::Success&) {  // --help
    if (rank == 0) std::cout << app.help();
    return as_int(exit_code::ok);
  } catch (const CLI::ParseError& e) {
    if (rank == 0) print_error(app.get_name() + ": " + e.what() + " (--help lists the flags)");
    return as_int(exit_code::usage);
  }
}

/// Runs `body` (which returns the exit code) and turns what it throws into a
/// message on stderr and an exit code: a failure every rank meets alike by
/// rank 0 alone, with its code; any other error by the rank that met it (of an
/// error shardex agreed on across ranks, whose other copies say "reported by
/// rank N", by that rank alone), with code 1.
template <class F>
int run(const std::string& name, int rank, F&& body) {
  try {
    return body();
  } catch (const failure& e) {
    if (rank == 0)
      print_error(name + ": " + e.what() + (e.code() == exit_code::usage ? " (--help lists the flags)" : ""));
    return as_int(e.code());
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (what.find("(reported by rank ") == std::string::npos)
      print_error(name + " (rank " + std::to_string(rank) + "): " + what);
    return as_int(exit_code::error);
  }
}

}  // namespace command_line
