// SPDX-License-Identifier: MIT
// The test runner across ranks: doctest runs on every rank; each rank's
// report is kept, and rank 0 prints the reports of the failing ranks (each
// line prefixed with its rank) and one summary combining all ranks. The exit
// code is non-zero if any rank failed. Tests that skip (no GPU) exit 77 on
// every rank, which mpirun passes through to Meson as SKIP. Without MPI the
// same runner runs the one rank of the one-rank world. A program may hold
// several test files (test/meson.build): --test-file=NAME runs that file's
// cases, and fails when the program has none of that file.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <iostream>
#include <sstream>
#include <string>

#include "shardex/backend/mpi/print.hpp"
#include "shardex/backend/mpi/environment.hpp"
#include "support/dist.hpp"

namespace {

doctest::TestRunStats g_stats;

// A program holds several test files (test/meson.build groups them); a test
// runs one file's cases, named by --test-file=NAME (its base name). Empty: all.
std::string g_test_file;
std::int64_t g_file_cases = 0;  // the test cases registered in that file, run or not

bool in_test_file(const doctest::TestCaseData& tc) {
  if (g_test_file.empty()) return true;
  const std::string file = tc.m_file.c_str();
  const std::string::size_type n = g_test_file.size();
  return file == g_test_file ||
         (file.size() > n && file.compare(file.size() - n, n, g_test_file) == 0 && file[file.size() - n - 1] == '/');
}

/// Takes --test-file=NAME out of argv (doctest does not know it); returns NAME.
std::string take_test_file(int& argc, char** argv) {
  const std::string flag = "--test-file=";
  std::string name;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]).rfind(flag, 0) == 0)
      name = argv[i] + flag.size();
    else
      argv[kept++] = argv[i];
  }
  argc = kept;
  return name;
}

/// Records the run's counts, which the console reporter only prints.
struct StatsListener : doctest::IReporter {
  explicit StatsListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override { g_stats = s; }
  void test_case_start(const doctest::TestCaseData& tc) override { g_file_cases += in_test_file(tc) ? 1 : 0; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData& tc) override { g_file_cases += in_test_file(tc) ? 1 : 0; }
};

}  // namespace

DOCTEST_REGISTER_LISTENER("shardex_stats", 1, StatsListener);

namespace shardex::test {
/// Why this test program cannot run here (empty: it can). A program that needs
/// something the machine may lack (a GPU) defines its own; this weak default
/// says every program can run.
__attribute__((weak)) std::string skip_reason() { return {}; }
}  // namespace shardex::test

int main(int argc, char** argv) {
  shardex::mpi::Environment env(argc, argv);
  const auto& comm = shardex::test::world();
  const int rank = comm.rank(), size = comm.size();
  if (const std::string why = shardex::test::skip_reason(); !why.empty()) {
    if (rank == 0) std::cout << "SKIP: " << why << std::endl;
    return 77;  // Meson's skip code; mpirun passes it on when every rank returns it
  }

  g_test_file = take_test_file(argc, argv);
  doctest::Context ctx;
  ctx.setOption("no-colors", true);  // the report is captured and re-printed, not a terminal
  if (!g_test_file.empty()) ctx.addFilter("source-file", ("*/" + g_test_file).c_str());  // as in_test_file
  ctx.applyCommandLine(argc, argv);
  std::ostringstream report;
  ctx.setCout(&report);
  int rc = 0;
  try {
    rc = ctx.run();
  } catch (const std::exception& e) {
    report << "uncaught exception: " << e.what() << "\n";
    rc = 1;
  }
  if (ctx.shouldExit()) {  // --help, --list-test-cases ...
    if (rank == 0) std::cout << report.str();
    return rc;
  }
  if (g_file_cases == 0 && !g_test_file.empty()) {  // a misspelt or missing file must not pass as "0 cases"
    if (rank == 0)
      std::cout << "[shardex] --test-file=" << g_test_file << ": no test case of that file in " << argv[0] << std::endl;
    return 1;
  }

  // Every line of a failing rank's report, prefixed with its rank.
  std::string mine;
  if (rc != 0) {
    std::istringstream lines(report.str());
    for (std::string line; std::getline(lines, line);)
      mine += "[rank " + std::to_string(rank) + "/" + std::to_string(size) + "] " + line + "\n";
  }
  shardex::mpi::print_in_rank_order(comm, mine, std::cout);

  // One summary over all ranks: sums of the counts, and which ranks failed.
  // (Through the Communicator, not MPI itself: the build without MPI runs this too.)
  std::int64_t totals[5] = {g_stats.numTestCasesPassingFilters, g_stats.numTestCasesFailed,
                            static_cast<std::int64_t>(g_stats.numAsserts),
                            static_cast<std::int64_t>(g_stats.numAssertsFailed), rc != 0 ? 1 : 0};
  comm.all_reduce(totals, 5);  // sums, in place
  std::ostringstream list;     // the failing ranks, on rank 0
  shardex::mpi::print_in_rank_order(comm, rc != 0 ? std::to_string(rank) + " " : std::string(), list);
  if (rank == 0) {
    // Cases skipped at this world size (doctest::skip, support/dist.hpp's
    // launched_ranks) or left out by a filter are said, not counted as passed.
    const std::int64_t not_run = g_file_cases - g_stats.numTestCasesPassingFilters;
    std::cout << "[shardex] " << size << (size == 1 ? " rank" : " ranks") << ": test cases " << totals[0] / size
              << " per rank" << (not_run > 0 ? " (" + std::to_string(not_run) + " skipped)" : std::string()) << ", "
              << totals[1] << " failed over all ranks; assertions " << totals[2] << " (" << totals[3] << " failed)";
    if (totals[4] > 0) {
      std::string ranks = list.str();
      if (!ranks.empty() && ranks.back() == ' ') ranks.pop_back();
      std::cout << "; failing ranks: " << ranks;
    }
    std::cout << (totals[4] > 0 ? " -> FAILED" : " -> passed") << std::endl;
  }
  return totals[4] > 0 ? 1 : 0;
}
