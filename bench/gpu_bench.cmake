# tessera_gpu_bench: the CUDA kernels on a 10M x 128 table (forward, backward
# with row-wise Adagrad, copy bandwidth); bench/gpu_bench_torch.py runs the
# same shapes through PyTorch. Only with CUDA; tests/gpu/run_device_checks.sh
# runs both.
if(TESSERA_CUDA_ENABLED)
  include(${PROJECT_SOURCE_DIR}/cmake/TesseraCuda.cmake)
  add_executable(tessera_gpu_bench ${CMAKE_CURRENT_LIST_DIR}/gpu_bench.cu)
  tessera_cuda_target(tessera_gpu_bench)
  target_link_libraries(tessera_gpu_bench PRIVATE tessera_kernels_cuda gflags)
endif()
