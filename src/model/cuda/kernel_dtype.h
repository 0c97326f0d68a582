// The element types keel's CUDA kernels take, named without CUDA's or ATen's headers.
#pragma once

namespace keel {

enum class KernelDtype { f32, bf16, f16 };

}  // namespace keel
