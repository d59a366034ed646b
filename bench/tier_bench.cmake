# tessera_tier_bench: the tiered row store (host memory over RocksDB) on a table
# ten times its host budget, LRU and LFU-with-ageing against the memory store;
# and the GPU tier (CLOCK) at the same budget, its slots in host memory or on a GPU.
add_executable(tessera_tier_bench ${CMAKE_CURRENT_LIST_DIR}/tier_bench.cc)
target_link_libraries(tessera_tier_bench PRIVATE
  tessera_ps_storage tessera_ps_lib tessera_kernels gflags nlohmann_json::nlohmann_json)
