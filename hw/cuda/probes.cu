// probes.cu: GPU bandwidth and FLOP probes (see gpu_probes.h).
#include <algorithm>
#include <functional>
#include <vector>

#include "hw/cuda/cuda_check.h"
#include "hw/cuda/gemm_cublas.h"
#include "hw/cuda/gpu_probes.h"

namespace feather::hw::cuda {
namespace {

__global__ void ReadKernel(const float4* data, size_t count, float* partial) {
  float sum = 0.0F;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    const float4 v = data[i];
    sum += v.x + v.y + v.z + v.w;
  }
  __shared__ float block_sum[256];
  block_sum[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) block_sum[threadIdx.x] += block_sum[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = block_sum[0];
}

// Owns device memory for the life of a probe.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { FEATHER_CUDA_CHECK(cudaMalloc(&data_, bytes)); }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  [[nodiscard]] void* get() const { return data_; }

 private:
  void* data_ = nullptr;
};

// A stream for the life of a probe.
class Stream {
 public:
  Stream() { FEATHER_CUDA_CHECK(cudaStreamCreate(&stream_)); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  [[nodiscard]] cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Times `work` on `stream` (one warm-up, then reps) and converts each time to `units / seconds`.
GpuProbeResult Time(cudaStream_t stream, int reps, double units,
                    const std::function<void(cudaStream_t)>& work) {
  cudaEvent_t start, stop;
  FEATHER_CUDA_CHECK(cudaEventCreate(&start));
  FEATHER_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> rates;
  work(stream);
  FEATHER_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (int r = 0; r < reps; ++r) {
    FEATHER_CUDA_CHECK(cudaEventRecord(start, stream));
    work(stream);
    FEATHER_CUDA_CHECK(cudaEventRecord(stop, stream));
    FEATHER_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    FEATHER_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    rates.push_back(units / (static_cast<double>(ms) * 1e-3));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(rates.begin(), rates.end());
  GpuProbeResult result;
  result.reps = reps;
  if (!rates.empty()) {
    result.best = rates.back();
    result.median = rates[rates.size() / 2];
  }
  return result;
}

}  // namespace

GpuProbeResult MeasureCopyBandwidth(size_t bytes, int reps) {
  DeviceBuffer src(bytes), dst(bytes);
  FEATHER_CUDA_CHECK(cudaMemset(src.get(), 1, bytes));
  Stream stream;
  return Time(stream.get(), reps, 2.0 * static_cast<double>(bytes) * 1e-9, [&](cudaStream_t s) {
    FEATHER_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, s));
  });
}

GpuProbeResult MeasureReadBandwidth(size_t bytes, int reps) {
  bytes = bytes / sizeof(float4) * sizeof(float4);
  DeviceBuffer data(bytes);
  FEATHER_CUDA_CHECK(cudaMemset(data.get(), 0, bytes));
  int sms = 0;
  FEATHER_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int blocks = sms * 8;
  DeviceBuffer partial(sizeof(float) * static_cast<size_t>(blocks));
  Stream stream;
  return Time(stream.get(), reps, static_cast<double>(bytes) * 1e-9, [&](cudaStream_t s) {
    ReadKernel<<<blocks, 256, 0, s>>>(static_cast<const float4*>(data.get()),
                                      bytes / sizeof(float4), static_cast<float*>(partial.get()));
    FEATHER_CUDA_CHECK(cudaGetLastError());
  });
}

GpuProbeResult MeasureBf16GemmTflops(int n, int reps) {
  const size_t bytes = size_t{2} * static_cast<size_t>(n) * static_cast<size_t>(n);
  DeviceBuffer a(bytes), b(bytes), c(bytes);
  FEATHER_CUDA_CHECK(cudaMemset(a.get(), 0, bytes));
  FEATHER_CUDA_CHECK(cudaMemset(b.get(), 0, bytes));
  Stream stream;
  CublasGemm gemm(stream.get());
  const double flop = 2.0 * n * static_cast<double>(n) * n;
  return Time(stream.get(), reps, flop * 1e-12,
              [&](cudaStream_t) { gemm.Bf16Gemm(n, n, n, a.get(), b.get(), c.get()); });
}

}  // namespace feather::hw::cuda
