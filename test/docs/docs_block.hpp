// SPDX-License-Identifier: MIT
// The blocks of the pages as the generated translation units register them
// (test/docs/extract_blocks.py), and what docs_main.cpp runs.
#pragma once

#include <type_traits>
#include <vector>

#include <shardex.hpp>

namespace docs {

struct Entry {
  const char* id;    // PAGE:LINE of the block's first code line
  const char* kind;  // "program", "fragment" or "declarations"
  int (*main)(int, char**);
  void (*fragment)(const shardex::mpi::Communicator&);
};

std::vector<Entry> all_blocks();

// A page's main, renamed block_main with a deduced return type (a main that
// falls off its end returns 0, a renamed one would not), taking argc and argv
// or nothing.
template <auto F>
int call_main(int argc, char** argv) {
  auto call = [&] {
    if constexpr (std::is_invocable_v<decltype(F), int, char**>)
      return F(argc, argv);
    else
      return F();
  };
  if constexpr (std::is_void_v<decltype(call())>) {
    call();
    return 0;
  } else {
    return call();
  }
}

}  // namespace docs
