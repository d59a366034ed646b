# tessera_restore_bench: a server's restore of its shards from a checkpoint's
# snapshots against `cat` of the same files, cold (bench/restore_bench.cc).
add_executable(tessera_restore_bench ${CMAKE_CURRENT_LIST_DIR}/restore_bench.cc)
target_link_libraries(tessera_restore_bench PRIVATE
  tessera_ps_lib tessera_ps_storage gflags nlohmann_json::nlohmann_json)
