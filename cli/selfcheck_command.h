// selfcheck_command.h: `feather selfcheck --target cuda [--stamp PATH]`, the first command to run
// on a GPU: every CUDA kernel against the CPU reference and the probes against the datasheet
// (hw/cuda/selfcheck.h), one PASS / FAIL / SKIP line each. Writes the stamp (default
// out/selfcheck/cuda.json, hw/cuda/selfcheck_stamp.h) that `feather calibrate --target cuda`
// requires. Without a GPU, or in a build without nvcc, it says so in one line and exits 2.
// Exit: 0 all passed, 1 a check failed, 2 no device / bad usage.
//
// CudaTargetGate is the check every other `--target cuda` / `--engine cuda` entry point runs
// first: "" when a device is present, else the one-line reason.
#pragma once

#include <iosfwd>
#include <string>

namespace feather {

inline constexpr const char* kDefaultSelfcheckStamp = "out/selfcheck/cuda.json";

struct SelfcheckCommandOptions {
  std::string target;
  std::string stamp_path = kDefaultSelfcheckStamp;
};

int SelfcheckCommand(const SelfcheckCommandOptions& options, std::ostream& out);

// "" when a CUDA device is present, else why not (one line).
[[nodiscard]] std::string CudaTargetGate();

// "" when `stamp_path` holds a passed self-check of this device and build, else why not.
[[nodiscard]] std::string SelfcheckStampGate(const std::string& stamp_path);

}  // namespace feather
