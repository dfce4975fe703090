# Sanitizer and fuzzing options for the whole build (included by the top CMakeLists.txt
# before any component, so every library, binary and test is compiled the same way).
#
# PEREGRINE_SANITIZE=address,undefined
#   Compiles and links everything with -fsanitize=<list>. UBSan findings abort
#   (-fno-sanitize-recover=undefined) so a test or fuzzer fails on the first one; with
#   GCC, "undefined" also turns on float-cast-overflow, which clang's group includes.
# PEREGRINE_FUZZ=ON (clang only)
#   Adds libFuzzer's coverage instrumentation (-fsanitize=fuzzer-no-link) everywhere and
#   builds the fuzz targets of fuzz/ as <name>_fuzzer executables. Use a build directory
#   of its own (scripts/fuzz.sh uses build-fuzz/); the main build stays GCC.

set(PEREGRINE_SANITIZE "" CACHE STRING
  "Comma-separated -fsanitize= list for the whole build, e.g. address,undefined (empty: none)")
option(PEREGRINE_FUZZ "Build the libFuzzer targets in fuzz/ (clang only)" OFF)

if(PEREGRINE_SANITIZE)
  add_compile_options(-fsanitize=${PEREGRINE_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${PEREGRINE_SANITIZE})
  if(PEREGRINE_SANITIZE MATCHES "undefined")
    add_compile_options(-fno-sanitize-recover=undefined)
    add_link_options(-fno-sanitize-recover=undefined)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      # clang's "undefined" includes float-cast-overflow (a double cast to an integer
      # type it does not fit); GCC's does not.
      add_compile_options(-fsanitize=float-cast-overflow -fno-sanitize-recover=float-cast-overflow)
      add_link_options(-fsanitize=float-cast-overflow)
    endif()
  endif()
endif()

if(PEREGRINE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "PEREGRINE_FUZZ=ON needs clang (libFuzzer): configure a separate "
                        "build directory with CC=clang CXX=clang++ (see scripts/fuzz.sh)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
