// Where and how a run computes: device, threads, precision, and the peak
// FLOP/s that MFU is measured against.
#pragma once

#include <torch/torch.h>

#include <string>

#include "config/config.h"
#include "model/autocast.h"

namespace keel {

struct ComputeSetup {
  torch::Device device = torch::kCPU;
  bool bf16_autocast = false;
  bool fp64 = false;  // train.precision fp64 (CPU): the model and its optimizer state in float64
  int threads = 1;
  double peak_flops = 0;        // per device (or per CPU process), FLOP/s
  std::string peak_source;      // "H200 dense bf16 (spec)", "measured fp32 matmul", ...
  std::string device_name;
  std::string attention_order;  // SDPA backends in the order tried, e.g. "cudnn, flash, efficient, math"
  std::string device_key;       // which physical device: "host/PCI bus id" on CUDA, empty on the CPU
};

// The CUDA device a rank computes and communicates on, decided here and
// nowhere else (setup_compute takes it, and the process group's collectives
// use the device setup_compute chose):
//   one visible device            device 0: one GPU per rank (SLURM
//                                 --gpus-per-task=1, CUDA_VISIBLE_DEVICES set
//                                 per rank), or ranks sharing one GPU (Gloo
//                                 only: NCCL refuses that, see Dist)
//   at least as many as ranks     device LOCAL_RANK
//   more ranks than devices (>1)  a DistError naming LOCAL_WORLD_SIZE and
//                                 CUDA_VISIBLE_DEVICES: two ranks would share
//                                 a GPU while others sat idle
int cuda_device_for_rank(int local_rank, int local_world, int visible_devices);

// Resolves train.device / precision / threads / tf32 and applies them.
// Throws std::runtime_error when cuda is asked for and absent.
ComputeSetup setup_compute(const TrainConfig& t, int local_rank = 0, int local_world = 1);

// Puts train.attention_backend first in SDPA's priority order (the others
// stay as fallbacks for shapes it does not support) and returns the order as
// text. `auto` prefers cuDNN on compute capability 9.0 and newer (Hopper),
// where it is faster than FlashAttention-2, and keeps PyTorch's order
// elsewhere. On the CPU only flash and math exist: `math` turns flash off,
// `cudnn` and `efficient` are a ConfigError.
std::string apply_attention_backend(AttentionBackend backend, torch::Device device, int cuda_major = 0);
// Puts back the SDPA order apply_attention_backend set on CUDA when something
// (PyTorch itself, on its first attention call) changed it since; true when it
// had changed. Cheap: StepRunner::begin_step calls it every step.
bool hold_attention_order();

// AutocastScope: model/autocast.h.


// FLOP/s of a 1024^3 fp32 matmul on this process's threads, the faster of
// BLAS and oneDNN (a CPU "peak": what keel's own linear layers can reach);
// the best of at least 10 calls per library, and of at least min_seconds of them.
double measure_cpu_matmul_flops(double min_seconds = 0);

}  // namespace keel
