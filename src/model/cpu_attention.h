// Causal attention on the CPU with its own backward (cpu_attention.cpp).
//
// PyTorch's CPU flash kernel (what SDPA picks for fp32 on the CPU) splits the
// queries into blocks of 32-256 rows but multiplies each block by every key
// up to 512 at a time, masking the future after the GEMM: for T <= 512 it
// does the full T x T work of a non-causal attention, forward and backward,
// and a grouped-query call expands K and V to every head. This kernel gives
// each query block only the keys it may see (about half the GEMM work at
// T = 512), and stacks the query heads that share a K/V head into one GEMM
// with it (grouped-query attention: 4 x 64 rows against the keys, not four
// GEMMs of 64). Same math as flash attention
// (an online softmax over key blocks; the backward recomputes the
// probabilities from the saved log-sum-exp, or, asked to at T <= 512, reads
// the ones the forward kept: set_cpu_attention_probs); results equal SDPA's
// up to float rounding. The backward's tasks and the order its K/V gradients are summed
// in depend only on the shapes and the thread count, so a run repeats bit for
// bit at a given thread count (across thread counts a GEMM may be rounded
// differently, as in every linear layer).
#pragma once

#include <torch/torch.h>

#include <string>

namespace keel {

// softmax(scale q kᵀ + causal mask) v for CPU fp32 q [B, H, T, D] and k, v
// [B, Hkv, T, D] (H a multiple of Hkv; query head h reads K/V head
// h / (H / Hkv), as SDPA's enable_gqa). Any strides; the head dimension is
// made dense if it is not. The result is [B, H, T, D], a transposed view of
// a dense [B, T, H, D] tensor (what the output projection reads). Returns an
// undefined tensor where it does not apply: not CPU fp32, the fused kernels
// off (KEEL_CPU_FUSED=0, KEEL_CPU_KERNELS=composite, a CompositeOnly guard),
// KEEL_CPU_ATTENTION=sdpa, or a LibTorch with neither oneDNN's brgemm nor a
// BLAS sgemm; the caller then runs SDPA. First derivatives only (no double
// backward).
torch::Tensor cpu_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   double scale);

// Whether cpu_causal_attention would run for a query of this device and dtype
// on this thread now (for the attention kernel's name in `keel bench`).
bool cpu_causal_attention_applies(torch::Device device, torch::ScalarType dtype);

// What runs its block GEMMs for a sequence of T tokens: "brgemm" or "sgemm".
std::string cpu_causal_attention_gemm(int64_t T);

// train.attention_backend on the CPU: auto allows this kernel (the default),
// flash and math ask for SDPA's own (train/device.cpp sets it per run).
void allow_cpu_causal_attention(bool on);

// What runs the kernel's block GEMMs. kAuto (the default): oneDNN's brgemm
// micro-kernel where this LibTorch has it and T is a multiple of 64, else BLAS
// sgemm (cpu_causal_attention_gemm says which). kOneDnn and kBlas force one
// for every T, as KEEL_CPU_ATTENTION_GEMM=onednn|blas does. Tests run both.
enum class CpuAttentionGemm { kAuto, kOneDnn, kBlas };
void set_cpu_attention_gemm(CpuAttentionGemm gemm);

// Whether the forward keeps its attention probabilities for the backward,
// which then reads them instead of recomputing them (one GEMM of the
// backward's five, and its exponentials). kSave keeps them where one key
// block holds every key (T <= 512): H x ~T^2 / 2 floats per sequence and
// layer, about 9 KiB a token a layer at H 8, T 512; longer sequences always
// recompute. kAuto (the default) keeps them as kSave does; kRecompute never
// keeps them (flash attention's memory, for a run short of memory).
// KEEL_CPU_ATTENTION_PROBS=save|recompute sets it for a process.
enum class CpuAttentionProbs { kAuto, kSave, kRecompute };
void set_cpu_attention_probs(CpuAttentionProbs probs);

// Floats of probabilities a call with T tokens keeps per sequence and query
// head (keel plan counts them); 0 where it recomputes them.
int64_t cpu_causal_attention_saved_probs(int64_t T);

}  // namespace keel
