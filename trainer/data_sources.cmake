# Training-data sources (Criteo TSV, CSV, synthetic), the Zipf sampler and the split
# of examples among trainers. Included from trainer/CMakeLists.txt; paths are
# relative to trainer/.
add_library(tessera_data STATIC
  criteo_source.cc
  csv_source.cc
  data_split.cc
  in_memory_source.cc
  synthetic_source.cc
  text_fields.cc
  zipf_sampler.cc
)
target_link_libraries(tessera_data PUBLIC tessera_common)
# GCC's -O2 vectorizes only loops it needs no epilogue for; the sampler's batch
# loop (ZipfSampler::SampleKeyed) needs the dynamic cost model to vectorize,
# which makes it ~4x faster.
set_source_files_properties(zipf_sampler.cc PROPERTIES
  COMPILE_OPTIONS "$<$<CXX_COMPILER_ID:GNU>:-fvect-cost-model=dynamic>")

tessera_add_test(trainer_fnv1a_test SOURCES fnv1a_test.cc LIBS tessera_data)
tessera_add_test(trainer_zipf_sampler_test SOURCES zipf_sampler_test.cc LIBS tessera_data OPTIMIZED)
tessera_add_test(trainer_data_split_test SOURCES data_split_test.cc LIBS tessera_data)
tessera_add_test(trainer_synthetic_source_test SOURCES synthetic_source_test.cc LIBS tessera_data)
tessera_add_test(trainer_criteo_source_test SOURCES criteo_source_test.cc LIBS tessera_data)
# The Criteo sample lives next to the checkout (../shared/data); the test skips
# visibly when it is absent, as in a fresh clone.
target_compile_definitions(trainer_criteo_source_test PRIVATE
  TESSERA_SHARED_DATA_DIR="${PROJECT_SOURCE_DIR}/../shared/data")
tessera_add_test(trainer_csv_source_test SOURCES csv_source_test.cc LIBS tessera_data)
target_compile_definitions(trainer_csv_source_test PRIVATE
  TESSERA_SHARED_DATA_DIR="${PROJECT_SOURCE_DIR}/../shared/data")

