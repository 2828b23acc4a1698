// SPDX-License-Identifier: MIT
// The docs program: every ```cpp block of README.md and docs/ compiled into one
// executable (test/docs/extract_blocks.py generates the units).
//   docs_blocks --list        one line per block: its id (PAGE:LINE) and kind
//   docs_blocks ID [ARGS...]  runs that block: a program's main gets ARGS; a
//                             fragment runs on MPI_COMM_WORLD, rank 0's output shown
#include <cstring>
#include <iostream>
#include <sstream>

#include "docs_block.hpp"

int main(int argc, char** argv) {
  const std::vector<docs::Entry> blocks = docs::all_blocks();
  if (argc < 2) {
    std::cerr << "usage: " << argv[0] << " --list | BLOCK_ID [ARGS...]\n";
    return 2;
  }
  if (std::strcmp(argv[1], "--list") == 0) {
    for (const docs::Entry& b : blocks) std::cout << b.id << " " << b.kind << "\n";
    return 0;
  }
  for (const docs::Entry& b : blocks) {
    if (std::strcmp(b.id, argv[1]) != 0) continue;
    if (b.main) {
      argv[1] = argv[0];  // the program sees itself as argv[0], then its own arguments
      return b.main(argc - 1, argv + 1);
    }
    if (!b.fragment) {
      std::cerr << argv[0] << ": block " << b.id << " holds declarations only; there is nothing to run\n";
      return 2;
    }
    shardex::mpi::Environment env(argc, argv);
    const auto comm = shardex::mpi::Communicator::world();
    std::ostringstream elsewhere;  // what ranks other than 0 print is not the page's output
    std::streambuf* const out = std::cout.rdbuf();
    if (comm.rank() != 0) std::cout.rdbuf(elsewhere.rdbuf());
    b.fragment(comm);
    std::cout.rdbuf(out);
    return 0;
  }
  std::cerr << argv[0] << ": no block " << argv[1] << " (--list shows them)\n";
  return 2;
}
