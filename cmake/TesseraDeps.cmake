# Every dependency is a Debian package (scripts/install_deps.sh installs them).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
# libzmq.pc's cflags name the headers of libzmq's own dependencies
# (-isystem /usr/include/mit-krb5, pgm, libxml2), which no code here
# includes, and CMake put them on the imported target one way on a fresh
# configure and another on the next: whichever script configured build/
# second recompiled everything. The target gets only zmq.h's folder, the
# same every time (none when it is a system folder the compiler searches).
find_path(TESSERA_ZMQ_INCLUDE_DIR zmq.h HINTS ${ZMQ_INCLUDEDIR} REQUIRED)
set_property(TARGET PkgConfig::ZMQ PROPERTY INTERFACE_COMPILE_OPTIONS "")
if(TESSERA_ZMQ_INCLUDE_DIR STREQUAL "/usr/include")
  set_property(TARGET PkgConfig::ZMQ PROPERTY INTERFACE_INCLUDE_DIRECTORIES "")
else()
  set_property(TARGET PkgConfig::ZMQ PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${TESSERA_ZMQ_INCLUDE_DIR}")
endif()
find_package(cppzmq REQUIRED)
# The trainers' sealed allreduce (trainer/collective_seal.h): OpenSSL's
# AES-GCM, 2.4x as fast as libsodium's here.
pkg_check_modules(CRYPTO REQUIRED IMPORTED_TARGET libcrypto)
# The roles' Prometheus endpoint (common/metrics_http.h).
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
find_package(gflags REQUIRED)
find_package(glog REQUIRED)
find_package(GTest REQUIRED)
find_package(Gloo REQUIRED)
find_package(RocksDB REQUIRED)
find_package(nlohmann_json REQUIRED)
# OpenBLAS itself, not the libblas.so.3 alternative: the reference BLAS that the
# alternative may point to is ~15x slower on the dense layers.
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)

# Debian's Gloo package declares an imported target without its include path
# on some versions; make it usable on its own.
if(TARGET gloo)
  get_target_property(_gloo_inc gloo INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT _gloo_inc)
    set_target_properties(gloo PROPERTIES INTERFACE_INCLUDE_DIRECTORIES /usr/include)
  endif()
endif()

# CUDA: found when nvcc is on PATH or in /usr/local/cuda.
set(TESSERA_CUDA_ENABLED OFF)
if(NOT TESSERA_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(TESSERA_CUDA_ENABLED ON)
  elseif(TESSERA_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TESSERA_WITH_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "Tessera: CUDA kernels ${TESSERA_CUDA_ENABLED}")

# Python: the extension links the libraries into a shared object, so every
# library is compiled position-independent when it is built (no measurable
# cost on x86-64). Debian's interpreter by default, where python3-torch and
# numpy are; -DPython3_EXECUTABLE=... builds for another.
set(TESSERA_PYTHON_ENABLED OFF)
if(NOT TESSERA_PYTHON STREQUAL "OFF")
  if(NOT Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python3_EXECUTABLE /usr/bin/python3)
  endif()
  find_package(Python3 COMPONENTS Interpreter Development.Module QUIET)
  if(Python3_FOUND)
    set(PYBIND11_FINDPYTHON ON)
    find_package(pybind11 CONFIG QUIET)
  endif()
  if(Python3_FOUND AND pybind11_FOUND)
    set(TESSERA_PYTHON_ENABLED ON)
    set(CMAKE_POSITION_INDEPENDENT_CODE ON)
    message(STATUS "Tessera: the Python extension builds for ${Python3_EXECUTABLE} (pybind11 ${pybind11_VERSION})")
  elseif(TESSERA_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "TESSERA_PYTHON=ON needs Python 3 development files and pybind11 (apt-get install python3-dev pybind11-dev)")
  else()
    message(STATUS "Tessera: no pybind11 or Python 3 development files; the Python extension is not built")
  endif()
endif()
