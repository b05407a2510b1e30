// profile_fuzzer.cc: libFuzzer target for the device-profile and model-description loaders
// (sim/engine/device_profile.h, sim/engine/model_config.h), which share the validating YAML reader.
//
// Input: YAML text, parsed both as a device profile and as a model description. Contract
// checked: each parse either succeeds or throws InputError naming the file (never another
// exception, a crash or UB); an accepted profile has every parameter inside the range the
// parameter table declares; an accepted model has GQA-consistent heads, and its derived sizes
// and the KV pool on a built-in profile compute without UB (or with the documented
// std::invalid_argument when the model does not fit).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "base/check.h"
#include "sim/engine/device_profile.h"
#include "sim/io/device_profile_yaml.h"
#include "sim/io/embedded_files.h"
#include "base/input_error.h"
#include "sim/engine/model_config.h"
#include "sim/engine/model_engine.h"
#include "sim/io/model_config_yaml.h"

namespace {

void CheckProblems(const feather::InputError& error) {
  FEATHER_CHECK(!error.problems().empty(), "an InputError without problems");
  for (const feather::InputProblem& p : error.problems()) {
    FEATHER_CHECK(!p.file.empty() && !p.message.empty(), "a problem without file or message");
  }
}

void CheckProfile(const feather::DeviceProfile& profile) {
  FEATHER_CHECK(!profile.name.empty() && !profile.device.empty(), "empty name or device");
  FEATHER_CHECK(!profile.provenance.empty(), "no provenance");
  for (const feather::ProfileParameterInfo& info : feather::ProfileParameters()) {
    const double value = profile.*info.field;
    FEATHER_CHECK(std::isfinite(value), "non-finite parameter");
    FEATHER_CHECK(info.min_exclusive ? value > info.min : value >= info.min, "below range");
    FEATHER_CHECK(value <= info.max, "above range");
    if (info.integer) FEATHER_CHECK(value == std::floor(value), "non-integer");
  }
}

const feather::DeviceProfile& BuiltInProfile() {
  static const feather::DeviceProfile profile = feather::ParseDeviceProfile(
      feather::FindEmbeddedFile("results/profiles/h100-sxm.yaml").value_or(""), "h100-sxm");
  return profile;
}

void CheckModel(const feather::ModelConfig& model) {
  FEATHER_CHECK(model.layers >= 1 && model.heads >= 1 && model.kv_heads >= 1, "zero shape");
  FEATHER_CHECK(model.heads % model.kv_heads == 0, "kv_heads must divide heads");
  FEATHER_CHECK(model.dtype_bytes == 2 || model.dtype_bytes == 4, "dtype");
  (void)model.WeightBytes();
  (void)model.StepWeightBytes();
  (void)model.AttentionFlopsPerPair();
  FEATHER_CHECK(model.KvBytesPerToken() > 0, "KV bytes per token");
  try {
    (void)feather::KvCacheBlocks(BuiltInProfile(), model, 16, 0.9);
  } catch (const std::invalid_argument&) {
    // documented: the model does not fit the device
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    CheckProfile(feather::ParseDeviceProfile(text, "fuzz-profile.yaml"));
  } catch (const feather::InputError& error) {
    CheckProblems(error);
  }
  try {
    CheckModel(feather::ParseModelConfig(text, "fuzz-model.yaml"));
  } catch (const feather::InputError& error) {
    CheckProblems(error);
  }
  return 0;
}
