// selfcheck.h: `feather selfcheck --target cuda` — the first thing to run on a GPU (CUDA builds
// only). Every kernel of hw/cuda/ runs on small and awkward shapes against the CPU, and the probes
// against the device's datasheet; each check prints one PASS / FAIL / SKIP line with its error and
// tolerance:
//   attention   every StandardAttentionCases() shape (decode, prefill, batch-wide and multi-level
//               cascade; fp32 / bf16 / fp16 KV; head dim 64 / 128; GQA 1–16; split-KV on and off)
//               vs the double-precision CPU reference: |err| ≤ 5e-5 + 1e-4·|want|;
//   merge       LaunchMergeStates vs EmulateMergeStates (same arithmetic): |err| ≤ 1e-6;
//   sgemm       cuBLAS fp32 vs the CPU's hw::Gemm on m×n×k = 1×33×65, 7×1536×1024, 129×257×63:
//               |err| ≤ 1e-5·k (fp32 sums of k products of O(1) values);
//   bf16 gemm   cuBLASLt vs a double product of the same bf16 inputs: |err| ≤ 1e-2·(1 + |want|)
//               (bf16 output rounding is 2^-8 relative);
//   engine      engine: cuda vs engine: cpu on one step of a 2-layer fp32 model (decode with a
//               shared prefix, cascade on, prefill chunks): logits |err| ≤ 1e-3·(1 + max|logit|);
//   probes      copy and read bandwidth, bf16 GEMM TFLOP/s within the datasheet's band
//               (hw/cuda/datasheet.h); SKIP on a device without a datasheet row;
//   cupti       DRAM bytes read by the read probe's kernel over 512 MiB (≫ L2) within
//               [0.95, 1.10] × the bytes it reads, and an L2 hit rate in [0, 1].
// A check that throws (a CUDA error, CUPTI without counter permissions) is a FAIL with the message.
// The result is the stamp calibrate --target cuda requires (hw/cuda/selfcheck_stamp.h).
#pragma once

#include <ostream>

#include "hw/cuda/device.h"
#include "hw/cuda/selfcheck_stamp.h"

namespace feather::hw::cuda {

[[nodiscard]] SelfcheckStamp RunCudaSelfcheck(const CudaDeviceInfo& device, std::ostream& out);

}  // namespace feather::hw::cuda
