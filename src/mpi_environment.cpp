// RAII MPI initialization: see include/shardex/backend/mpi/environment.hpp.
#include "shardex/backend/mpi/environment.hpp"

#include "shardex/backend/mpi/communicator.hpp"
#include "shardex/device/host/memory_pool.hpp"

namespace shardex::mpi {

namespace {
bool initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}
}  // namespace

Environment::Environment(int& argc, char**& argv) {
  host::keep_freed_memory();
  if (!initialized()) {
    check(MPI_Init(&argc, &argv), "MPI_Init");
    owns_ = true;
  }
}

Environment::Environment() {
  host::keep_freed_memory();
  if (!initialized()) {
    check(MPI_Init(nullptr, nullptr), "MPI_Init");
    owns_ = true;
  }
}

Environment::~Environment() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized) MPI_Finalize();  // never throws: errors at exit are ignored
}

bool Environment::active() noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return initialized() && !finalized;
}

}  // namespace shardex::mpi
