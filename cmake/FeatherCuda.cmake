# CUDA is optional: hw/cuda/ builds its kernels only when a CUDA compiler is found (the toolkit at
# /usr/local/cuda on these machines) and FEATHER_ENABLE_CUDA is ON. Otherwise one line says it is
# skipped and hw/cuda/ builds its host-only parts (plans, emulation, metric parsing), whose
# device entry points then report "built without CUDA".
#   -DFEATHER_ENABLE_CUDA=OFF or -DCMAKE_CUDA_COMPILER=   build without CUDA although nvcc exists
#   -DFEATHER_CUDA_ARCHITECTURES=90                        one architecture, for faster iteration
option(FEATHER_ENABLE_CUDA "Build the CUDA target (hw/cuda/) when a CUDA compiler is found" ON)
set(FEATHER_CUDA_ARCHITECTURES "80;89;90" CACHE STRING
    "CUDA architectures of hw/cuda/ (default sm_80, sm_89, sm_90: A100, L4/L40/RTX 40, H100/H200)")
set(FEATHER_HAVE_CUDA OFF)
if(NOT FEATHER_ENABLE_CUDA)
  message(STATUS "feather: FEATHER_ENABLE_CUDA=OFF; CUDA parts of hw/ skipped")
  return()
endif()
if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(CMAKE_CUDA_ARCHITECTURES ${FEATHER_CUDA_ARCHITECTURES})
  set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 knows no CUDA20 dialect for nvcc; the .cu files are C++17
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  # Dependencies found under /usr/include (nlohmann-json, Eigen) would otherwise reach nvcc as
  # -isystem=/usr/include, which breaks libstdc++'s #include_next <math.h>.
  list(APPEND CMAKE_CUDA_IMPLICIT_INCLUDE_DIRECTORIES /usr/include)
  find_package(CUDAToolkit REQUIRED)
  set(FEATHER_HAVE_CUDA ON)
  message(STATUS "feather: CUDA compiler found (${CMAKE_CUDA_COMPILER}, CUDA "
                 "${CUDAToolkit_VERSION}); hw/cuda/ kernels enabled for sm_${FEATHER_CUDA_ARCHITECTURES}")
else()
  message(STATUS "feather: no CUDA compiler found; CUDA parts of hw/ skipped")
endif()
