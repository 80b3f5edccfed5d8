# Install rules and the exported CMake package:
#
#   find_package(attnlab 0.3 REQUIRED)
#   target_link_libraries(app PRIVATE attnlab::attnlab)
#
# Layout under the prefix: lib/libattnlab.so*, include/attnlab/{attention.h,attnlab.h,fp8.h,serving.h,version.h}, bin/attnlab
# (the CLI, when built) and lib/cmake/attnlab/ (the package files). lib is the platform's CMAKE_INSTALL_LIBDIR.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ATTNLAB_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/attnlab"
    CACHE STRING "Where the attnlab CMake package files are installed, relative to the prefix")
mark_as_advanced(ATTNLAB_INSTALL_CMAKEDIR)

# The library. Its dependencies (fmt header-only, Threads, and the CUDA libraries in CUDA builds) are linked
# PRIVATE, so the exported target carries none of them: consumers need no find_dependency().
# INSTALL_RPATH_USE_LINK_PATH keeps the folders of shared libraries linked from outside the system paths (the CUDA
# toolkit's, say) in the installed library's RUNPATH.
set_target_properties(attnlab PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
# The target's own $<INSTALL_INTERFACE:include> covers the usual include directory; only another one is added.
set(_attnlab_includes)
if(NOT CMAKE_INSTALL_INCLUDEDIR STREQUAL "include")
  set(_attnlab_includes INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endif()
install(TARGETS attnlab EXPORT attnlabTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT attnlab_runtime NAMELINK_COMPONENT attnlab_dev
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT attnlab_dev
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT attnlab_runtime
  ${_attnlab_includes})
unset(_attnlab_includes)

install(FILES
    ${PROJECT_SOURCE_DIR}/include/attnlab/attention.h
    ${PROJECT_SOURCE_DIR}/include/attnlab/attnlab.h
    ${PROJECT_SOURCE_DIR}/include/attnlab/fp8.h
    ${PROJECT_SOURCE_DIR}/include/attnlab/serving.h
    ${PROJECT_BINARY_DIR}/include/attnlab/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attnlab COMPONENT attnlab_dev)

# The CLI (target attnlab_cli, installed as bin/attnlab) finds the library next door: bin/../lib.
if(TARGET attnlab_cli)
  file(RELATIVE_PATH _attnlab_bin_to_lib "/${CMAKE_INSTALL_BINDIR}" "/${CMAKE_INSTALL_LIBDIR}")
  set_target_properties(attnlab_cli PROPERTIES
    INSTALL_RPATH "\$ORIGIN/${_attnlab_bin_to_lib}"
    INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS attnlab_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT attnlab_runtime)
  unset(_attnlab_bin_to_lib)
endif()

# The package: attnlabTargets.cmake (the imported attnlab::attnlab), attnlabConfig.cmake, attnlabConfigVersion.cmake.
install(EXPORT attnlabTargets
  NAMESPACE attnlab::
  FILE attnlabTargets.cmake
  DESTINATION ${ATTNLAB_INSTALL_CMAKEDIR}
  COMPONENT attnlab_dev)

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/attnlabConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/attnlabConfig.cmake
  INSTALL_DESTINATION ${ATTNLAB_INSTALL_CMAKEDIR})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/cmake/attnlabConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)  # before 1.0 a minor version may change the API (src/CMakeLists.txt)
install(FILES
    ${PROJECT_BINARY_DIR}/cmake/attnlabConfig.cmake
    ${PROJECT_BINARY_DIR}/cmake/attnlabConfigVersion.cmake
  DESTINATION ${ATTNLAB_INSTALL_CMAKEDIR}
  COMPONENT attnlab_dev)
