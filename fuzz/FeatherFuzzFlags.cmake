# FeatherFuzzFlags.cmake: compiler flags of a FEATHER_FUZZ=ON build (scripts/fuzz.sh makes one in
# build/fuzz). Included from the top-level CMakeLists.txt before any library is defined, so that
# every library a fuzz target links is compiled with coverage instrumentation for libFuzzer
# (-fsanitize=fuzzer-no-link) and with AddressSanitizer + UndefinedBehaviorSanitizer. The fuzz
# executables themselves add -fsanitize=fuzzer (libFuzzer's main) in fuzz/CMakeLists.txt.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "FEATHER_FUZZ=ON needs clang (libFuzzer): configure with "
                      "-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ (scripts/fuzz.sh does)")
endif()
if(FEATHER_SANITIZE)
  message(FATAL_ERROR "FEATHER_FUZZ=ON already builds with ASan+UBSan; leave FEATHER_SANITIZE off")
endif()
# C and C++ only: a CUDA compiler (hw/, never linked by a fuzz target) does not take these flags.
add_compile_options(
  "$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link,address,undefined>"
  "$<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=undefined;-fno-omit-frame-pointer;-g>")
add_link_options("$<$<LINK_LANGUAGE:C,CXX>:-fsanitize=address,undefined>")
