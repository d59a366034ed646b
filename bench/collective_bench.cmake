# tessera_collective_bench: the trainers' sealed allreduce against Gloo's own,
# ranks as threads (bench/collective_bench.cc).
add_executable(tessera_collective_bench ${CMAKE_CURRENT_LIST_DIR}/collective_bench.cc)
target_link_libraries(tessera_collective_bench PRIVATE tessera_trainer_lib gflags)
