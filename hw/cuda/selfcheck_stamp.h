// selfcheck_stamp.h: the record `feather selfcheck --target cuda` leaves when every kernel passed
// on a device, and the gate `feather calibrate --target cuda` puts on it: a CUDA profile is only
// measured by a build whose kernels have been checked against the CPU reference on this very GPU.
//
// The stamp is a small JSON file (default out/selfcheck/cuda.json):
//   {"passed": true, "device_name": "...", "device_uuid": "GPU-...", "git_rev": "abc1234",
//    "feather_version": "0.1.0", "date_utc": "...", "results": [{"kernel": ..., "passed": ...,
//    "max_abs_error": ..., "tolerance": ..., "detail": ...}, ...]}
// StampAllows accepts it only when it passed, names this device's UUID and this build's git
// revision; anything else is a one-line reason. Parsing names the file and the field at fault.
// O(results).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace feather::hw::cuda {

struct SelfcheckResult {
  std::string kernel;  // "decode bf16 d128 g4 split", "probe dram copy", ...
  bool passed = false;
  double max_abs_error = 0;  // or the measured figure, for probes
  double tolerance = 0;
  std::string detail;  // why it failed, or the shape
};

struct SelfcheckStamp {
  bool passed = false;
  std::string device_name;
  std::string device_uuid;
  std::string git_rev;
  std::string feather_version;
  std::string date_utc;
  std::vector<SelfcheckResult> results;
};

[[nodiscard]] std::string StampToJson(const SelfcheckStamp& stamp);
// nullopt and *error ("PATH: field 'x': ...") on a malformed stamp.
[[nodiscard]] std::optional<SelfcheckStamp> ParseStamp(const std::string& text,
                                                       const std::string& path, std::string* error);
// "" when calibration may proceed, else why not.
[[nodiscard]] std::string StampAllows(const SelfcheckStamp& stamp, const std::string& device_uuid,
                                      const std::string& git_rev);

}  // namespace feather::hw::cuda
