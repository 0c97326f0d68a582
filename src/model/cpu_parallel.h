// A parallel loop for keel's CPU kernels that really runs on several threads.
//
// at::parallel_for's OpenMP backend (the PyTorch wheels') is a header
// template: its `#pragma omp parallel` is compiled into the caller. keel is
// built without -fopenmp (Clang emits calls to LLVM's runtime only, and a
// second OpenMP runtime beside LibTorch's libgomp would fight it for the
// cores), so there the pragma is ignored and the loop runs on one thread.
// keel::parallel_for hands its chunks to LibTorch's own OpenMP team through
// GOMP_parallel, the libgomp entry point GCC emits for that pragma, found at
// run time. Without it (a LibTorch on another threading backend) it is
// at::parallel_for, which such a backend compiles into LibTorch itself.
#pragma once

#include <cstdint>
#include <functional>

namespace keel {

// f(b, e) over [begin, end) in at most at::get_num_threads() contiguous
// chunks of at least `grain` items, the split at::parallel_for makes; one
// chunk, on this thread, when already inside a parallel region. The first
// exception a chunk throws is rethrown here.
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f);

// Whether parallel_for reaches an OpenMP runtime (for tests and `keel bench`).
bool parallel_for_uses_openmp();

}  // namespace keel
