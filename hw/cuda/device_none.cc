// device_none.cc: device.h in a build without a CUDA compiler (FEATHER_HAVE_CUDA off).
#include "hw/cuda/device.h"

namespace feather::hw::cuda {

bool CudaCompiledIn() { return false; }

CudaDeviceInfo QueryCudaDevice() {
  CudaDeviceInfo info;
  info.why_not =
      "this feather was built without CUDA (no nvcc at configure time, or FEATHER_ENABLE_CUDA=OFF)";
  return info;
}

}  // namespace feather::hw::cuda
