// The instruction sets keel's own CPU loops (attention softmax, gated
// activation, loss) are compiled for; the CPU picks one when keel loads.
// A build with -DKEEL_CPU_AVX512_CLONES=OFF leaves the AVX-512 copy out, so
// an AVX-512 machine runs what an AVX2-only CPU would (with
// ATEN_CPU_CAPABILITY=avx2 and ONEDNN_MAX_CPU_ISA=AVX2 for LibTorch's side;
// docs/speed.md, "AVX2 on an AVX-512 machine").
#pragma once

#if defined(KEEL_NO_AVX512_CLONES)
#define KEEL_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#define KEEL_SIMD_CEILING "avx2"
#else
#define KEEL_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define KEEL_SIMD_CEILING "avx512f"
#endif
