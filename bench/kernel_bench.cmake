# tessera_kernel_bench: single-threaded CPU kernel throughput, comparable to
# /work/shared/peers/torch_embeddingbag_kernel.py (bench/run_kernel_bench.sh runs both).
add_executable(tessera_kernel_bench ${CMAKE_CURRENT_LIST_DIR}/kernel_bench.cc)
target_link_libraries(tessera_kernel_bench PRIVATE tessera_kernels gflags nlohmann_json::nlohmann_json)
