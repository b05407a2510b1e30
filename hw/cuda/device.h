// device.h: is there a CUDA device, and what is it. The one question every `--target cuda` /
// `engine: cuda` entry point asks first; without a GPU (or in a build without nvcc) the answer
// carries a one-line reason and the command exits 2 with it.
//
// QueryCudaDevice never throws and never aborts: cudaGetDeviceCount failing (no driver, no
// device) or returning 0 is an ordinary "not available". In a build without CUDA
// (FEATHER_HAVE_CUDA off: device_none.cc) it always says so. O(1) after the driver's first
// initialisation (which can take a second on a GPU machine).
#pragma once

#include <cstddef>
#include <string>

namespace feather::hw::cuda {

struct CudaDeviceInfo {
  bool available = false;
  std::string why_not;  // set when !available: "no CUDA device: cudaGetDeviceCount: ..."
  int device = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  std::string uuid;  // "GPU-xxxxxxxx-..." (the self-check stamp keys on it)
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  size_t memory_bytes = 0;
  size_t l2_bytes = 0;
  int runtime_version = 0;
  int driver_version = 0;
};

// Whether this build compiled the CUDA kernels (nvcc was found at configure time).
[[nodiscard]] bool CudaCompiledIn();

// Device 0, or why there is none.
[[nodiscard]] CudaDeviceInfo QueryCudaDevice();

}  // namespace feather::hw::cuda
