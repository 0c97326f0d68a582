// The safetensors file format (https://huggingface.co/docs/safetensors):
//
//   bytes [0, 8)        N, the header length, unsigned 64-bit little-endian
//   bytes [8, 8+N)      JSON header, padded with spaces to a multiple of 8:
//                         {"__metadata__": {"key": "value", ...},
//                          "name": {"dtype": "F32", "shape": [2, 3],
//                                   "data_offsets": [begin, end]}, ...}
//   bytes [8+N, EOF)    tensor data, row-major, little-endian; offsets are
//                       relative to 8+N and tile this region with no gap
//
// It is what Hugging Face tools, PyTorch (safetensors.torch) and NumPy read,
// so keel's weights can be inspected and converted without LibTorch's pickle
// format. Supported dtypes: F64 F32 F16 BF16 F8_E4M3 F8_E5M2 I64 I32 I16 I8
// U64 U32 U16 U8 BOOL.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "util/error.h"

namespace keel {

// Name -> tensor, in order. Reading returns tensors in file (data offset)
// order, which for files written here is the order they were given in.
using TensorMap = std::vector<std::pair<std::string, torch::Tensor>>;

// Writes `tensors` (any device, any strides; copied to CPU contiguous one at a
// time, so a GPU model needs only one tensor of host memory extra) to `path`,
// creating or truncating it, and fsyncs it. Not atomic: a crash leaves a
// partial file, which the reader rejects; CheckpointStore provides atomicity.
// Throws CheckpointError for unsupported dtypes, duplicate or empty names and
// every failed system call (disk full included).
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Reads a whole file into CPU tensors. Validates the header length against
// the file size, the JSON, each dtype and shape, that each tensor's byte range
// equals numel * itemsize, and that the ranges tile the data region exactly
// (in range, no overlap, no gap, no trailing bytes). Throws CheckpointError
// "path: what is wrong" with byte offsets.
TensorMap read_safetensors(const std::string& path,
                           std::map<std::string, std::string>* metadata = nullptr);

// "F32" etc. for a supported dtype; throws CheckpointError otherwise.
std::string safetensors_dtype_name(torch::ScalarType type);

}  // namespace keel
