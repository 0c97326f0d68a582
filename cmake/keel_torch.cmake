# Finds LibTorch 2.x.
#
# Order: an explicit -DCMAKE_PREFIX_PATH (official archive, cluster install,
# another environment's torch.utils.cmake_prefix_path) wins; otherwise the
# Python named by KEEL_TORCH_PYTHON (default: the project's .venv) is asked for
# torch.utils.cmake_prefix_path.
set(KEEL_TORCH_PYTHON "${CMAKE_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "Python whose PyTorch provides LibTorch when CMAKE_PREFIX_PATH does not")

find_package(Torch QUIET CONFIG)
if(NOT Torch_FOUND)
  if(NOT EXISTS "${KEEL_TORCH_PYTHON}")
    message(FATAL_ERROR
      "LibTorch not found. Run scripts/setup.sh (installs PyTorch into .venv), or pass "
      "-DCMAKE_PREFIX_PATH=/path/to/libtorch, or -DKEEL_TORCH_PYTHON=/path/to/python-with-torch.")
  endif()
  execute_process(
    COMMAND "${KEEL_TORCH_PYTHON}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _keel_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _keel_torch_rc ERROR_VARIABLE _keel_torch_err)
  if(NOT _keel_torch_rc EQUAL 0)
    message(FATAL_ERROR "${KEEL_TORCH_PYTHON} could not import torch: ${_keel_torch_err}\n"
                        "Hint: run scripts/setup.sh, or point -DKEEL_TORCH_PYTHON at a Python with PyTorch 2.x.")
  endif()
  list(APPEND CMAKE_PREFIX_PATH "${_keel_torch_prefix}")
  find_package(Torch REQUIRED CONFIG)
endif()

# Torch_VERSION is set by TorchConfigVersion.cmake.
if(Torch_VERSION VERSION_LESS 2.1)
  message(FATAL_ERROR "keel needs LibTorch >= 2.1 (found ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX}). "
                      "Debian's libtorch-dev (1.13) is too old; use scripts/setup.sh.")
endif()

set(KEEL_WITH_CUDA OFF)
if(TORCH_CUDA_LIBRARIES OR CAFFE2_USE_CUDA)
  set(KEEL_WITH_CUDA ON)
endif()

# NCCL: ProcessGroupNCCL is usable when the LibTorch build has it (its headers
# are guarded by USE_C10D_NCCL) and libtorch_cuda links NCCL.
# Its header includes <nccl.h>, which the wheel keeps in the nvidia-nccl
# package next to torch (site-packages/nvidia/nccl/include).
set(KEEL_WITH_NCCL OFF)
if(KEEL_WITH_CUDA AND EXISTS "${TORCH_INSTALL_PREFIX}/include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp")
  find_path(KEEL_NCCL_INCLUDE_DIR nccl.h
            HINTS "${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include" ENV NCCL_INCLUDE_DIR
            PATH_SUFFIXES include)
  if(KEEL_NCCL_INCLUDE_DIR)
    set(KEEL_WITH_NCCL ON)
  else()
    message(WARNING "keel: LibTorch has ProcessGroupNCCL but nccl.h was not found (set NCCL_INCLUDE_DIR); "
                    "multi-GPU training is off in this build")
  endif()
endif()

# Gloo (the CPU backend): LibTorch links it in, but its headers ship with
# neither the wheel nor the archive. ProcessGroupGloo.hpp needs them; the
# Debian package libgloo-dev provides them (keel only holds Gloo objects
# through shared_ptr, so their version need not match LibTorch's copy).
set(KEEL_WITH_GLOO OFF)
find_path(KEEL_GLOO_INCLUDE_DIR gloo/algorithm.h)
if(KEEL_GLOO_INCLUDE_DIR AND EXISTS "${TORCH_INSTALL_PREFIX}/include/torch/csrc/distributed/c10d/ProcessGroupGloo.hpp")
  set(KEEL_WITH_GLOO ON)
else()
  message(WARNING "keel: gloo headers not found (Debian: libgloo-dev): multi-process CPU training is off in this build")
endif()

message(STATUS "keel: LibTorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX}")
message(STATUS "keel: CUDA code paths: ${KEEL_WITH_CUDA} (CUDA toolkit ${CUDAToolkit_VERSION}${CUDA_VERSION})")
message(STATUS "keel: NCCL (c10d ProcessGroupNCCL): ${KEEL_WITH_NCCL}")
message(STATUS "keel: Gloo (c10d ProcessGroupGloo): ${KEEL_WITH_GLOO}")
