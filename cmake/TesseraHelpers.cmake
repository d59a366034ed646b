# Compile options every Tessera target gets.
add_library(tessera_options INTERFACE)
target_include_directories(tessera_options INTERFACE ${PROJECT_SOURCE_DIR})
target_compile_options(tessera_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-missing-field-initializers>)
if(TESSERA_WERROR)
  target_compile_options(tessera_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
if(TESSERA_X86_64_V3 AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  target_compile_options(tessera_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=x86-64-v3>)
endif()
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # GCC's -O2 vectorizes only loops that need no scalar remainder and no
  # aliasing check, which left the trainer's dense SGD step, the sealed
  # allreduce's sum and the pooling of row replies one float at a time. The
  # -O3 cost model vectorizes them; no floating-point sum is reordered, so
  # results keep their bits (a sync job's losses are the same).
  target_compile_options(tessera_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fvect-cost-model=dynamic>)
endif()
if(TESSERA_SANITIZE OR TESSERA_FUZZ)
  target_compile_options(tessera_options INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
  target_link_options(tessera_options INTERFACE -fsanitize=address,undefined)
endif()
if(TESSERA_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "TESSERA_FUZZ=ON needs clang's libFuzzer: configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  # Every library the targets link is instrumented for coverage; only the
  # targets link libFuzzer itself (tessera_add_fuzz_target).
  target_compile_options(tessera_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
endif()
if(CMAKE_POSITION_INDEPENDENT_CODE)
  # Position-independent code (for the Python extension) that still inlines
  # and calls our own functions directly, as the executables' code does.
  target_compile_options(tessera_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fno-semantic-interposition>)
endif()
if(TESSERA_CUDA_ENABLED)
  target_compile_definitions(tessera_options INTERFACE TESSERA_HAVE_CUDA=1)
endif()

# The sanitizer builds compile the tests' own files at -O0: under ASan and
# UBSan clang spends more than half of a test file's compile time optimizing
# it (elastic_test.cc: 32 s at -O2, 14 s at -O0), and the code under test,
# the libraries and the roles, stays at the build's level. Only with clang:
# it contracts a*b+c into an FMA within an expression at every level, so a
# test's own arithmetic rounds as at -O2; GCC contracts at -O2 only, after
# inlining, so its builds keep one level for tests and libraries.
set(TESSERA_TEST_CODE_O0 OFF)
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND (TESSERA_SANITIZE OR TESSERA_FUZZ))
  set(TESSERA_TEST_CODE_O0 ON)
endif()

# tessera_add_test(NAME SOURCES... LIBS ... [LABELS ...] [TIMEOUT s] [OPTIMIZED])
# One GoogleTest binary registered with CTest as one test with its own time bound.
# OPTIMIZED: the test's own code does the heavy arithmetic (references over
# many rows, samplers' statistics), so it keeps the build's level in the
# sanitizer builds too (at -O0 those three tests ran 33 s longer).
# main() of the GoogleTest binaries: a binary whose every test skipped
# exits 77, shown by CTest as skipped (tests/support/gtest_main.cc).
add_library(tessera_gtest_main STATIC ${PROJECT_SOURCE_DIR}/tests/support/gtest_main.cc)
target_link_libraries(tessera_gtest_main PUBLIC GTest::gtest tessera_options)

function(tessera_add_test name)
  cmake_parse_arguments(T "OPTIMIZED" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest tessera_gtest_main tessera_options)
  if(TESSERA_TEST_CODE_O0 AND NOT T_OPTIMIZED)
    target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O0>)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}" SKIP_RETURN_CODE 77)
endfunction()

# tessera_add_fuzz_target(NAME SOURCES... LIBS ... [DICT file])
# A libFuzzer binary defining LLVMFuzzerTestOneInput, registered with CTest
# (label fuzz) as a run of TESSERA_FUZZ_SECONDS from its seeds in
# tests/fuzz/corpus/NAME (read only: new inputs go to a scratch folder);
# a crash, leak, UB report or slow input fails it and leaves the input in
# <build>/fuzz-artifacts/. Target tessera_fuzz builds them all.
function(tessera_add_fuzz_target name)
  cmake_parse_arguments(F "" "DICT" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${F_SOURCES})
  target_link_libraries(${name} PRIVATE ${F_LIBS} tessera_options)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  add_dependencies(tessera_fuzz ${name})
  set(dict "")
  if(F_DICT)
    set(dict "-dict=${PROJECT_SOURCE_DIR}/tests/fuzz/${F_DICT}")
  endif()
  # The same flags for bench/fuzz.sh's long runs.
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/${name}.flags "${dict}\n")
  add_test(NAME ${name}
    COMMAND ${PROJECT_SOURCE_DIR}/tests/fuzz/run_fuzz_target.sh $<TARGET_FILE:${name}>
            ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${name} ${CMAKE_BINARY_DIR}/fuzz-artifacts
            -max_total_time=${TESSERA_FUZZ_SECONDS} ${dict})
  math(EXPR timeout "${TESSERA_FUZZ_SECONDS} + 120")
  set_tests_properties(${name} PROPERTIES LABELS fuzz TIMEOUT ${timeout})
endfunction()
