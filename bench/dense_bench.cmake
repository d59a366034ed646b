# tessera_dense_bench: a trainer's dense model alone, the dense-only limit
# bench/e2e_bench.sh sets the job's examples/s against (bench/dense_bench.cc).
add_executable(tessera_dense_bench ${CMAKE_CURRENT_LIST_DIR}/dense_bench.cc)
target_link_libraries(tessera_dense_bench PRIVATE tessera_trainer_lib gflags)
