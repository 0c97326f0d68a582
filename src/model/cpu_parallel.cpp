#include "model/cpu_parallel.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>

namespace keel {

namespace {

// libgomp's ABI: GOMP_parallel(fn, data, num_threads, flags) runs fn(data) on
// a team of num_threads threads, this one included, and returns when all are done.
using GompParallel = void (*)(void (*)(void*), void*, unsigned, unsigned);
using OmpQuery = int (*)();

struct OpenMp {
  GompParallel parallel = nullptr;
  OmpQuery thread_num = nullptr, num_threads = nullptr;
};

const OpenMp& openmp() {
  static const OpenMp o = [] {
    OpenMp r;
    // Loaded with LibTorch (libtorch_cpu needs libgomp), so in the global scope.
    r.parallel = reinterpret_cast<GompParallel>(dlsym(RTLD_DEFAULT, "GOMP_parallel"));
    r.thread_num = reinterpret_cast<OmpQuery>(dlsym(RTLD_DEFAULT, "omp_get_thread_num"));
    r.num_threads = reinterpret_cast<OmpQuery>(dlsym(RTLD_DEFAULT, "omp_get_num_threads"));
    if (!r.parallel || !r.thread_num || !r.num_threads) r = OpenMp{};
    return r;
  }();
  return o;
}

struct Job {
  int64_t begin, end, chunk;
  const std::function<void(int64_t, int64_t)>* f;
  std::once_flag failed;
  std::exception_ptr error;
};

void run_chunk(void* data) {
  auto* job = static_cast<Job*>(data);
  const int64_t tid = openmp().thread_num();
  const int64_t b = job->begin + tid * job->chunk;
  if (b >= job->end) return;
  try {
    (*job->f)(b, std::min(job->end, b + job->chunk));
  } catch (...) {
    std::call_once(job->failed, [&] { job->error = std::current_exception(); });
  }
}

}  // namespace

bool parallel_for_uses_openmp() { return AT_PARALLEL_OPENMP && openmp().parallel != nullptr; }

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  if (end <= begin) return;
  if (!parallel_for_uses_openmp()) {
    at::parallel_for(begin, end, grain, f);
    return;
  }
  const int64_t n = end - begin, g = std::max<int64_t>(grain, 1);
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), (n + g - 1) / g);
  if (threads <= 1 || at::in_parallel_region()) {
    f(begin, end);
    return;
  }
  Job job{begin, end, (n + threads - 1) / threads, &f, {}, nullptr};
  openmp().parallel(run_chunk, &job, static_cast<unsigned>(threads), 0);
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace keel
