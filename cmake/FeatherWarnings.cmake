# Warnings every feather target compiles with (kept clean; -Werror with FEATHER_WERROR=ON). C++
# sources only: nvcc takes its own flags (hw/cuda/CMakeLists.txt).
add_library(feather_warnings INTERFACE)
target_compile_options(feather_warnings INTERFACE
  "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wpedantic;-Wshadow;-Wconversion;-Wno-sign-conversion;-Wnon-virtual-dtor;-Wold-style-cast;-Woverloaded-virtual;-Wimplicit-fallthrough>")
if(FEATHER_WERROR)
  target_compile_options(feather_warnings INTERFACE "$<$<COMPILE_LANGUAGE:CXX>:-Werror>")
endif()
