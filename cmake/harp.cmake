# Helpers shared by every subsystem's CMakeLists.

set(HARP_WARNINGS -Wall -Wextra -Wpedantic)
if(HARP_WERROR)
  list(APPEND HARP_WARNINGS -Werror)
endif()

# harp_add_library(NAME SOURCES ... DEPS ...)
# Creates target harp_<NAME>; DEPS are the only libraries it may use (the arrows of
# docs/architecture.md), so a forbidden dependency fails at link time.
function(harp_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(harp_${name} STATIC ${ARG_SOURCES})
  target_include_directories(harp_${name} PUBLIC ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(harp_${name} PRIVATE ${HARP_WARNINGS})
  target_link_libraries(harp_${name} PUBLIC ${ARG_DEPS})
endfunction()

# harp_add_test(NAME SOURCES ... DEPS ... LABELS ... [TIMEOUT s] [SERIAL] [COST c])
# SERIAL: ctest runs these alone (timing tests: a test on the other core would skew them).
# COST: ctest starts tests in decreasing cost where it has no timings of its own yet (a
# fresh clone, CI); the default 0 leaves the order to ctest.
function(harp_add_test name)
  cmake_parse_arguments(ARG "SERIAL" "TIMEOUT;COST" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  if(NOT ARG_COST)
    set(ARG_COST 0)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${HARP_WARNINGS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE
    HARP_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
    HARP_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    HARP_BINARY_DIR="${PROJECT_BINARY_DIR}")
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name}
    PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT} RUN_SERIAL ${ARG_SERIAL} COST ${ARG_COST}
    DISCOVERY_TIMEOUT 60)
endfunction()
