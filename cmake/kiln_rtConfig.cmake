# find_package(kiln_rt): the kiln runtime as installed by `cmake --install` -- the imported target
# kiln::rt (lib/kiln/libkiln_rt.a, the headers of include/kiln, and what it links: Highway, fmt,
# threads), for an application that links a bundle of `kiln compile` (examples/embed).
include(CMakeFindDependencyMacro)
find_dependency(Threads)
get_filename_component(_kiln_rt_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET kiln::rt)
  add_library(kiln::rt STATIC IMPORTED)
  set_target_properties(kiln::rt PROPERTIES
    IMPORTED_LOCATION "${_kiln_rt_prefix}/@CMAKE_INSTALL_LIBDIR@/kiln/libkiln_rt.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_kiln_rt_prefix}/@CMAKE_INSTALL_INCLUDEDIR@/kiln"
    INTERFACE_LINK_LIBRARIES "hwy;fmt;Threads::Threads"
    IMPORTED_LINK_INTERFACE_LANGUAGES CXX)
endif()
unset(_kiln_rt_prefix)
