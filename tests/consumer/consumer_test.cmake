# Tests that the installed package works for a project outside this build:
#   consumer.install    cmake --install <this build> --prefix <build>/tests/consumer/prefix
#   consumer.build      configure and build tests/consumer against that prefix (find_package(attnlab))
#   consumer.run        run the consumer: forwards through the C++ API and the C ABI, checked against a reference
# Fixtures chain them, so `ctest -R consumer.run` runs all three, in order.
set(_consumer_dir ${CMAKE_CURRENT_BINARY_DIR}/consumer)
set(_consumer_prefix ${_consumer_dir}/prefix)
set(_consumer_build ${_consumer_dir}/build)

# A fresh prefix and consumer build each time, so nothing left over from an earlier run can satisfy the consumer.
add_test(NAME consumer.install
  COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR} -DPREFIX=${_consumer_prefix}
          -DCONFIG=$<CONFIG> -DCLEAN=${_consumer_build} -P ${CMAKE_CURRENT_LIST_DIR}/install_into.cmake)
set_tests_properties(consumer.install PROPERTIES FIXTURES_SETUP attnlab_consumer_installed
  LABELS "cpu;install" TIMEOUT 120)

set(_consumer_options
  -DCMAKE_PREFIX_PATH=${_consumer_prefix}
  -DATTNLAB_EXPECTED_PREFIX=${_consumer_prefix}
  -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}
  -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(CMAKE_C_COMPILER)  # the consumer also builds one C file; attnlab itself may not have enabled C
  list(APPEND _consumer_options -DCMAKE_C_COMPILER=${CMAKE_C_COMPILER})
endif()
if(CMAKE_MAKE_PROGRAM)
  list(APPEND _consumer_options -DCMAKE_MAKE_PROGRAM=${CMAKE_MAKE_PROGRAM})
endif()
add_test(NAME consumer.build
  COMMAND ${CMAKE_CTEST_COMMAND}
          --build-and-test ${CMAKE_CURRENT_LIST_DIR} ${_consumer_build}
          --build-generator ${CMAKE_GENERATOR}
          --build-noclean
          --build-options ${_consumer_options})
set_tests_properties(consumer.build PROPERTIES
  FIXTURES_REQUIRED attnlab_consumer_installed
  FIXTURES_SETUP attnlab_consumer_built
  LABELS "cpu;install" TIMEOUT 300)

add_test(NAME consumer.run COMMAND ${_consumer_build}/attnlab_consumer)
set_tests_properties(consumer.run PROPERTIES FIXTURES_REQUIRED "attnlab_consumer_installed;attnlab_consumer_built"
  LABELS "cpu;install" TIMEOUT 60)

unset(_consumer_dir)
unset(_consumer_prefix)
unset(_consumer_build)
unset(_consumer_options)
