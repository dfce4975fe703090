# Build helpers shared by every component (in the spirit of Abseil's absl_cc_library).
#
# peregrine_cc_library(NAME name [SOURCES ...] [GLOB_DIR dir] PUBLIC_DEPS ... PRIVATE_DEPS ...)
#   Declares the static library peregrine_<name> with the alias peregrine::<name>.
#   GLOB_DIR compiles every *.cc directly in dir except *_main.cc files (executables)
#   and *_test.cc files. The repository root is the include root: #include "diagnosis/acf.h".
#
# peregrine_cc_binary(NAME name SOURCES ... DEPS ...)
#   A thin executable (flags -> options -> start -> wait).
#
# peregrine_test_suite(NAME name DIR dir DEPS ... [TAGS_ARE_LABELS])
#   One Catch2 executable <name>_tests from every *_test.cc in dir; each TEST_CASE is
#   registered with CTest on its own so the suite runs in parallel. Every suite links the
#   shared kit peregrine::testing (tests/testing/).

set(PEREGRINE_WARNINGS -Wall -Wextra)

# Executables link with gold where the toolchain has it: about 40% faster than BFD ld on
# the test executables (analyze_tests 2.2 -> 1.4 s, deploy_tests 5.0 -> 2.8 s), which the
# 2-core CI build links ~70 of. Shared libraries (the NCCL hook and stand-in, with their
# version scripts) keep the default linker.
include(CheckLinkerFlag)
check_linker_flag(CXX "-fuse-ld=gold" PEREGRINE_HAVE_GOLD)
if(PEREGRINE_HAVE_GOLD)
  string(APPEND CMAKE_EXE_LINKER_FLAGS " -fuse-ld=gold")
endif()
set(PEREGRINE_TEST_OPTIMIZATION -O0 CACHE STRING "Optimisation flags of the test suites' own code")

function(peregrine_cc_library)
  cmake_parse_arguments(ARG "" "NAME;GLOB_DIR" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(srcs ${ARG_SOURCES})
  if(ARG_GLOB_DIR)
    file(GLOB globbed CONFIGURE_DEPENDS ${ARG_GLOB_DIR}/*.cc)
    list(FILTER globbed EXCLUDE REGEX "(_main|_test)\\.cc$")
    list(APPEND srcs ${globbed})
  endif()
  if(NOT srcs)
    # A component with headers only so far.
    add_library(peregrine_${ARG_NAME} INTERFACE)
    target_include_directories(peregrine_${ARG_NAME} INTERFACE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
    target_link_libraries(peregrine_${ARG_NAME} INTERFACE ${ARG_PUBLIC_DEPS})
    add_library(peregrine::${ARG_NAME} ALIAS peregrine_${ARG_NAME})
    return()
  endif()
  add_library(peregrine_${ARG_NAME} STATIC ${srcs})
  target_include_directories(peregrine_${ARG_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_compile_options(peregrine_${ARG_NAME} PRIVATE ${PEREGRINE_WARNINGS})
  target_link_libraries(peregrine_${ARG_NAME} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  add_library(peregrine::${ARG_NAME} ALIAS peregrine_${ARG_NAME})
endfunction()

function(peregrine_cc_binary)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_include_directories(${ARG_NAME} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_compile_options(${ARG_NAME} PRIVATE ${PEREGRINE_WARNINGS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS})
  set_target_properties(${ARG_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
endfunction()

# PROCESSORS: the CPUs each test of the suite keeps busy (CTest's PROCESSORS; default 1).
# `ctest -j N` then runs tests beside it only on the CPUs it leaves free: on the 2-core CI
# machine a suite giving 2 runs alone. A suite that measures timing declares what its
# processes use, because another test's load would be a real slowdown for it to detect.
function(peregrine_test_suite)
  cmake_parse_arguments(ARG "" "NAME;DIR;PROCESSORS" "DEPS" ${ARGN})
  if(NOT ARG_PROCESSORS)
    set(ARG_PROCESSORS 1)
  endif()
  file(GLOB srcs CONFIGURE_DEPENDS ${ARG_DIR}/*_test.cc)
  if(NOT srcs)
    return()
  endif()
  add_executable(${ARG_NAME}_tests ${srcs})
  target_include_directories(${ARG_NAME}_tests PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  # Test code is compiled without optimisation: it halves the suites' compile time (most of
  # the build) and the code under test is the libraries', which keep the build type's flags.
  target_compile_options(${ARG_NAME}_tests PRIVATE ${PEREGRINE_WARNINGS} ${PEREGRINE_TEST_OPTIMIZATION} -pthread -Winvalid-pch)
  target_precompile_headers(${ARG_NAME}_tests REUSE_FROM peregrine_test_pch)
  # cpp-httplib's feature macros (TLS, zlib, brotli) change its classes' layout: every
  # suite gets the ones the libraries are built with, so that a test including httplib.h
  # and a library using it agree (at -O0 a mismatch corrupted memory in controller_tests).
  target_link_libraries(${ARG_NAME}_tests PRIVATE peregrine_catch_main peregrine::testing PkgConfig::HTTPLIB ${ARG_DEPS})
  target_compile_definitions(${ARG_NAME}_tests PRIVATE
    PEREGRINE_BINARY_DIR="${PROJECT_BINARY_DIR}" PEREGRINE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  set_target_properties(${ARG_NAME}_tests PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  catch_discover_tests(${ARG_NAME}_tests
    TEST_PREFIX "${ARG_NAME}: "
    PROPERTIES TIMEOUT 300 PROCESSORS ${ARG_PROCESSORS})
endfunction()
