// device.cc: device.h through the CUDA runtime (CUDA builds).
#include "hw/cuda/device.h"

#include <cuda_runtime.h>

#include <cstdio>

namespace feather::hw::cuda {

bool CudaCompiledIn() { return true; }

CudaDeviceInfo QueryCudaDevice() {
  CudaDeviceInfo info;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    info.why_not = std::string("no CUDA device: cudaGetDeviceCount: ") + cudaGetErrorString(status);
    return info;
  }
  if (count == 0) {
    info.why_not = "no CUDA device: cudaGetDeviceCount returned 0";
    return info;
  }
  cudaDeviceProp prop{};
  const cudaError_t prop_status = cudaGetDeviceProperties(&prop, 0);
  if (prop_status != cudaSuccess) {
    info.why_not = std::string("CUDA device 0 unusable: cudaGetDeviceProperties: ") +
                   cudaGetErrorString(prop_status);
    return info;
  }
  info.available = true;
  info.name = prop.name;
  char uuid[64];
  const auto* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  std::snprintf(uuid, sizeof uuid,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  info.uuid = uuid;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.memory_bytes = prop.totalGlobalMem;
  info.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  cudaRuntimeGetVersion(&info.runtime_version);
  cudaDriverGetVersion(&info.driver_version);
  return info;
}

}  // namespace feather::hw::cuda
