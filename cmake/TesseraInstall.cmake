# Installing Tessera (cmake --install BUILD --prefix PREFIX) and packaging it
# (target tessera_deb: cpack -G DEB). Included last from the top
# CMakeLists.txt, once every target exists. Under PREFIX:
#   bin/                     tessera_master, tessera_ps, tessera_trainer,
#                            tessera_compare_dumps, tessera_export, tessera-quickstart
#   lib/                     the static libraries the programs are built from
#   lib/cmake/Tessera/       find_package(Tessera CONFIG): targets Tessera::tessera_*
#   include/tessera/         their headers, as the code includes them ("common/status.h")
#   share/tessera/scripts/   the launch scripts, which run bin/'s programs
#   share/tessera/configs/   the job configs
# Nothing is built by an install: build target tessera_install_targets (or
# everything) first. docs/operations.md#installing says how to use the result.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TESSERA_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/Tessera")
set(TESSERA_INSTALL_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}/tessera")
set(TESSERA_INSTALL_DATADIR "${CMAKE_INSTALL_DATADIR}/tessera")

set(TESSERA_INSTALLED_PROGRAMS tessera_master tessera_ps tessera_trainer tessera_compare_dumps)
if(TARGET tessera_export)
  list(APPEND TESSERA_INSTALLED_PROGRAMS tessera_export)
endif()

# tessera_link_closure(LIBS IMPORTED TARGET...): the project's own libraries
# that the targets link, directly or through one another, and the imported
# targets those link. Installing what the programs link, found here rather
# than listed, keeps a library added later in the package (install(EXPORT)
# refuses a library that links one not exported).
function(tessera_link_closure out_libraries out_imported)
  set(todo ${ARGN})
  set(seen "")
  set(imported_deps "")
  while(todo)
    list(POP_FRONT todo t)
    # target_link_libraries called from another folder marks names "::@(id)".
    string(REGEX REPLACE "::@\\(.*\\)$" "" t "${t}")
    if(t STREQUAL "" OR NOT TARGET "${t}" OR t IN_LIST seen)
      continue()
    endif()
    get_target_property(imported ${t} IMPORTED)
    if(imported)
      list(APPEND imported_deps ${t})
      continue()
    endif()
    list(APPEND seen ${t})
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(deps ${t} INTERFACE_LINK_LIBRARIES)
    else()
      get_target_property(deps ${t} LINK_LIBRARIES)
    endif()
    if(deps)
      list(APPEND todo ${deps})
    endif()
  endwhile()
  set(libraries "")
  foreach(t IN LISTS seen)
    get_target_property(type ${t} TYPE)
    if(type MATCHES "^(STATIC|SHARED|OBJECT|INTERFACE)_LIBRARY$")
      list(APPEND libraries ${t})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES imported_deps)
  set(${out_libraries} ${libraries} PARENT_SCOPE)
  set(${out_imported} ${imported_deps} PARENT_SCOPE)
endfunction()
tessera_link_closure(TESSERA_INSTALLED_LIBRARIES _tessera_imported_deps ${TESSERA_INSTALLED_PROGRAMS})

# The pkg-config modules among those (libzmq, openblas, ...: Debian ships no
# CMake package for them), as PREFIX=module for TesseraConfig.cmake to find
# under the target names the exported libraries use (PkgConfig::PREFIX).
set(TESSERA_PKG_CONFIG_MODULES "")
foreach(t IN LISTS _tessera_imported_deps)
  if(t MATCHES "^PkgConfig::(.+)$")
    set(prefix "${CMAKE_MATCH_1}")
    if(NOT ${prefix}_MODULE_NAME)
      message(FATAL_ERROR "TesseraInstall: no pkg-config module name for ${t} (pkg_check_modules(${prefix} ...) at the top level?)")
    endif()
    list(APPEND TESSERA_PKG_CONFIG_MODULES "${prefix}=${${prefix}_MODULE_NAME}")
  endif()
endforeach()

# What an install copies; scripts/test.sh builds it for tests/install.
add_custom_target(tessera_install_targets DEPENDS ${TESSERA_INSTALLED_PROGRAMS} ${TESSERA_INSTALLED_LIBRARIES})
# `make install` and cpack build nothing themselves (by default they would
# build every test and benchmark first); tessera_deb builds what it packs.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)

# tessera_options carries this build's warnings, -Werror, -march and
# sanitizer compile flags: a project built against the installed libraries
# gets none of them, only the include folder (and TESSERA_HAVE_CUDA, which
# headers test). Sanitizer link flags stay: instrumented libraries need them.
get_target_property(_tessera_compile_options tessera_options INTERFACE_COMPILE_OPTIONS)
if(_tessera_compile_options)
  set_property(TARGET tessera_options PROPERTY INTERFACE_COMPILE_OPTIONS
    "$<BUILD_INTERFACE:${_tessera_compile_options}>")
endif()
set_property(TARGET tessera_options PROPERTY INTERFACE_INCLUDE_DIRECTORIES
  "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>" "$<INSTALL_INTERFACE:${TESSERA_INSTALL_INCLUDEDIR}>")

install(TARGETS ${TESSERA_INSTALLED_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ${TESSERA_INSTALLED_LIBRARIES} EXPORT TesseraTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT TesseraTargets NAMESPACE Tessera:: DESTINATION ${TESSERA_INSTALL_CMAKEDIR})

# Headers: every folder a library is built in, its subfolders included
# (kernels/cpu, kernels/cuda), at the same path under include/tessera/.
set(_tessera_header_dirs "")
foreach(t IN LISTS TESSERA_INSTALLED_LIBRARIES)
  get_target_property(dir ${t} SOURCE_DIR)
  list(APPEND _tessera_header_dirs "${dir}")
endforeach()
list(REMOVE_DUPLICATES _tessera_header_dirs)
foreach(dir IN LISTS _tessera_header_dirs)
  file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}" "${dir}")
  if(rel STREQUAL "" OR rel MATCHES "^\\.\\.")
    continue()  # tessera_options is made at the top; it has no headers
  endif()
  install(DIRECTORY "${dir}/" DESTINATION "${TESSERA_INSTALL_INCLUDEDIR}/${rel}"
    FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh" PATTERN "*test_util*" EXCLUDE)
endforeach()

configure_package_config_file(cmake/TesseraConfig.cmake.in
  "${CMAKE_CURRENT_BINARY_DIR}/TesseraConfig.cmake"
  INSTALL_DESTINATION ${TESSERA_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/TesseraConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/TesseraConfig.cmake" "${CMAKE_CURRENT_BINARY_DIR}/TesseraConfigVersion.cmake"
  DESTINATION ${TESSERA_INSTALL_CMAKEDIR})

# Scripts and configs keep their places relative to each other (quickstart.sh
# reads ../configs); install_layout.sh beside the installed scripts tells
# common.sh where bin/ is, relative to them so that the prefix can move.
set(_tessera_scripts_dir "${TESSERA_INSTALL_DATADIR}/scripts")
install(PROGRAMS
  scripts/run_master.sh scripts/run_ps.sh scripts/run_trainer.sh scripts/launch_local.sh
  scripts/make_job_keys.sh scripts/quickstart.sh scripts/plot_run.py
  DESTINATION ${_tessera_scripts_dir})
install(FILES scripts/common.sh DESTINATION ${_tessera_scripts_dir})
install(PROGRAMS scripts/slurm/tessera.sbatch scripts/slurm/tessera_add_ps.sbatch
  DESTINATION ${_tessera_scripts_dir}/slurm)
install(DIRECTORY configs/ DESTINATION ${TESSERA_INSTALL_DATADIR}/configs)

# tessera_shell_path(OUT FROM TO ANCHOR): install folder TO as a shell
# expression in a file installed in folder FROM, which the shell expression
# ANCHOR names at run time: relative to it, so that the prefix can move
# (cmake --install --prefix, cpack), unless TO is absolute.
function(tessera_shell_path out from to anchor)
  if(IS_ABSOLUTE "${to}")
    set(${out} "${to}" PARENT_SCOPE)
  else()
    file(RELATIVE_PATH rel "/prefix/${from}" "/prefix/${to}")
    set(${out} "${anchor}/${rel}" PARENT_SCOPE)
  endif()
endfunction()

tessera_shell_path(_tessera_bin ${_tessera_scripts_dir} ${CMAKE_INSTALL_BINDIR} "$(dirname \"\${BASH_SOURCE[0]}\")")
file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/install_layout.sh"
  "# Written by cmake/TesseraInstall.cmake: these scripts are installed; the\n"
  "# programs are in the prefix's bin/. Sourced by common.sh.\n"
  "TESSERA_INSTALLED_BIN_DIR=\"$(cd \"${_tessera_bin}\" && pwd)\"\n")
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/install_layout.sh" DESTINATION ${_tessera_scripts_dir})

# bin/tessera-quickstart: the installed quickstart, from anywhere.
tessera_shell_path(_tessera_scripts ${CMAKE_INSTALL_BINDIR} ${_tessera_scripts_dir} "$(dirname \"$(readlink -f \"$0\")\")")
file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/tessera-quickstart"
  "#!/usr/bin/env bash\n"
  "# Trains the quickstart job with the installed programs: share/tessera/scripts/quickstart.sh.\n"
  "exec \"${_tessera_scripts}/quickstart.sh\" \"$@\"\n")
install(PROGRAMS "${CMAKE_CURRENT_BINARY_DIR}/tessera-quickstart" DESTINATION ${CMAKE_INSTALL_BINDIR})

# ---- the .deb: cpack -G DEB in the build folder, or target tessera_deb ----
set(TESSERA_PACKAGE_MAINTAINER "Tessera maintainers <tessera@localhost>"
  CACHE STRING "Maintainer field of the .deb")
set(CPACK_PACKAGE_NAME tessera)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${TESSERA_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "parameter server for training recommendation models")
set(CPACK_PACKAGE_DESCRIPTION
  "Embedding tables sharded over parameter servers, the dense model replicated on trainers and kept in sync with an allreduce, a master that plans the sharding and drives the job, all over ZeroMQ. Programs, launch scripts, job configs, and the static libraries with their headers and CMake package (find_package(Tessera)).")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)  # executables only; static libraries keep their symbols
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${TESSERA_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION}")
# The shared libraries' packages (libzmq5, librocksdb7.8, libgloo0, ...)
# come from dpkg-shlibdeps, from what the programs link; python3 runs the
# quickstart's config rewrite and plot_run.py.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3")
# What building against the installed libraries needs (TesseraConfig.cmake).
set(CPACK_DEBIAN_PACKAGE_SUGGESTS
  "cmake, g++, pkgconf, libzmq3-dev, cppzmq-dev, libgoogle-glog-dev, librocksdb-dev, libgloo-dev, libssl-dev, libopenblas-dev, nlohmann-json3-dev, libcpp-httplib-dev, python3-matplotlib")
set(CPACK_GENERATOR DEB)
include(CPack)

add_custom_target(tessera_deb
  COMMAND ${CMAKE_CPACK_COMMAND} -G DEB --config "${CMAKE_BINARY_DIR}/CPackConfig.cmake"
  WORKING_DIRECTORY "${CMAKE_BINARY_DIR}"
  COMMENT "Packing tessera_${PROJECT_VERSION}_*.deb"
  VERBATIM)
add_dependencies(tessera_deb tessera_install_targets)
