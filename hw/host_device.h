// host_device.h: FEATHER_HOST_DEVICE, the qualifier of functions that both the host compiler and
// nvcc compile (`__host__ __device__` under nvcc, nothing under g++), so one definition of a piece
// of arithmetic serves the CPU code, the CPU tests and the CUDA kernels (hw/weight_init.h,
// hw/cuda/attention_math.h).
#pragma once

#if defined(__CUDACC__)
#define FEATHER_HOST_DEVICE __host__ __device__
#else
#define FEATHER_HOST_DEVICE
#endif
