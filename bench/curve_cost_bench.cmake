# tessera_curve_cost_bench: the CPU libzmq's CURVE adds per MB moved, against
# plain TCP, with no job around it (bench/curve_cost_bench.cc).
add_executable(tessera_curve_cost_bench ${CMAKE_CURRENT_LIST_DIR}/curve_cost_bench.cc)
target_link_libraries(tessera_curve_cost_bench PRIVATE tessera_options cppzmq PkgConfig::ZMQ gflags Threads::Threads)
