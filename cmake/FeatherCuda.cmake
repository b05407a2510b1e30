# CUDA is optional: hw/ builds its CUDA kernels only when a CUDA compiler is found
# (the toolkit at /usr/local/cuda on these machines). Otherwise one line says it is skipped.
if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(FEATHER_HAVE_CUDA ON)
  message(STATUS "feather: CUDA compiler found (${CMAKE_CUDA_COMPILER}); CUDA parts of hw/ enabled")
else()
  set(FEATHER_HAVE_CUDA OFF)
  message(STATUS "feather: no CUDA compiler found; CUDA parts of hw/ skipped")
endif()
