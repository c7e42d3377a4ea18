# find_package(kiln): the kiln compiler as installed by `cmake --install` -- the imported target
# kiln::kiln (the DSL, the model zoo, the passes, the backends and the command line of
# tools/cli.h, with their headers in include/kiln) and one target per layer (kiln::ir,
# kiln::frontend, kiln::models, kiln::passes, kiln::codegen, kiln::runtime, kiln::cli), for a
# program that defines models of its own (examples/custom_gpt). It links what kiln links, all
# from Debian: LLVM 19, Highway, fmt, nlohmann-json, CLI11, cairo, and Open MPI where it was
# built with it.
include(CMakeFindDependencyMacro)
find_dependency(Threads)
find_dependency(LLVM 19.1 CONFIG HINTS /usr/lib/llvm-19/lib/cmake/llvm /usr/lib/llvm-19/cmake)
find_dependency(hwy)
find_dependency(fmt)
find_dependency(nlohmann_json 3)
find_dependency(CLI11 CONFIG)
if(@KILN_MPI@) # built with MPI (KILN_MPI): kiln::runtime_mpi links Open MPI's C library
  get_property(_kiln_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(NOT "C" IN_LIST _kiln_languages)
    enable_language(C) # FindMPI's C component needs it (a C++-only project has not enabled it)
  endif()
  unset(_kiln_languages)
  find_dependency(MPI COMPONENTS C)
endif()
include("${CMAKE_CURRENT_LIST_DIR}/kilnTargets.cmake")
# Programs built on kiln link standalone executables (`compile --exe`) with this installation's
# runtime, wherever they run from (tools/cli.h).
get_filename_component(_kiln_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set_property(TARGET kiln::kiln APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS
             KILN_INSTALL_PREFIX="${_kiln_prefix}")
unset(_kiln_prefix)
