# Settings every Tessera CUDA target shares. Included where CUDA targets are
# defined (kernels/CMakeLists.txt, bench/gpu_bench.cmake), only when
# TESSERA_CUDA_ENABLED.

# sm_80 machine code, sm_90 machine code plus compute_90 PTX (which newer GPUs
# compile at load time).
set(TESSERA_CUDA_ARCHITECTURES "80-real;90" CACHE STRING "CUDA architectures of the Tessera kernels")

# CUDA sources inherit CXX_STANDARD 20; CMake 3.25 has no nvcc flag for it
# (3.26+ does), so name it. CMake reads it in each CUDA target's directory.
if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()

# tessera_cuda_target(TARGET): architectures, whole-program compilation (no
# device link step), and the C++ targets' warnings for host code under nvcc.
# nvcc's own remarks stay warnings, except calls across host/device (a bug).
function(tessera_cuda_target target)
  set_target_properties(${target} PROPERTIES
    CUDA_ARCHITECTURES "${TESSERA_CUDA_ARCHITECTURES}"
    CUDA_SEPARABLE_COMPILATION OFF
    CUDA_RUNTIME_LIBRARY Static)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-missing-field-initializers
      --Werror=cross-execution-space-call>)
  if(TESSERA_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Werror>)
  endif()
endfunction()
