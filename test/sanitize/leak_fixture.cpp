// SPDX-License-Identifier: MIT
// The fixture of the sanitizer build's leak check (test/meson.build, test
// 'sanitizer reports a leak'): a program that leaks one array must end with
// LeakSanitizer's report naming the function that allocated it, through the
// same preloaded library and suppressions as the suite, so that they cannot
// hide a leak of shardex's own.
#include <mpi.h>

namespace {
int* kept = nullptr;
}

[[gnu::noinline]] void shardex_leaking_function() {
  kept = new int[16]{1};
  kept = nullptr;  // the only pointer to the array is gone: a leak
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  shardex_leaking_function();
  MPI_Finalize();
  return 0;
}
