// device_profile.cc: the parameter table of the cost model and the YAML loader for profiles.
//
// The loader reads every field before it throws, so one InputError lists every problem of the
// file (missing, mistyped, out of range, unknown or duplicate keys, bad `source`), each with its
// 1-based line and dotted key path ("parameters.dram_bw_bytes_per_s.value").
#include "sim/device_profile.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <sstream>
#include <utility>

#include "sim/input_error.h"
#include "sim/yaml_map_reader.h"

namespace feather {
namespace {

using P = DeviceProfile;

// Ranges: wide enough for any real device, narrow enough to catch a unit slip (GB/s for B/s).
constexpr std::array<ProfileParameterInfo, kNumProfileParameters> kParameters = {{
    {"memory_bytes", &P::memory_bytes, 0, true, 1e15, true, "device memory capacity (bytes)"},
    {"activation_reserve_bytes", &P::activation_reserve_bytes, 0, false, 1e15, true,
     "memory kept for activations, CUDA graphs and workspaces (bytes)"},
    {"dram_bw_bytes_per_s", &P::dram_bw_bytes_per_s, 1e9, false, 1e15, false,
     "peak DRAM (HBM/GDDR) bandwidth (bytes/s)"},
    {"dense_flops_per_s", &P::dense_flops_per_s, 1e9, false, 1e18, false,
     "peak dense 16-bit tensor FLOP/s"},
    {"sm_count", &P::sm_count, 1, false, 1e5, true, "streaming multiprocessors"},
    {"gemm_bw_efficiency", &P::gemm_bw_efficiency, 0, true, 1, false,
     "achieved fraction of DRAM bandwidth when streaming weights"},
    {"gemm_flops_efficiency", &P::gemm_flops_efficiency, 0, true, 1, false,
     "achieved fraction of peak FLOP/s in compute-bound GEMMs"},
    {"attn_bw_efficiency", &P::attn_bw_efficiency, 0, true, 1, false,
     "achieved fraction of DRAM bandwidth in attention KV traffic"},
    {"attn_flops_efficiency", &P::attn_flops_efficiency, 0, true, 1, false,
     "achieved fraction of peak FLOP/s in compute-bound attention"},
    {"l2_bw_bytes_per_s", &P::l2_bw_bytes_per_s, 1e9, false, 1e16, false,
     "effective bandwidth of KV reads served by L2 (bytes/s)"},
    {"reuse_hit_max", &P::reuse_hit_max, 0, false, 1, false,
     "fraction of in-window repeat KV reads that hit L2"},
    {"reuse_window_ctas", &P::reuse_window_ctas, 1, false, 1e7, true,
     "decode-attention CTAs whose reads meet in L2 (the reuse window)"},
    {"cascade_layer_ns", &P::cascade_layer_ns, 0, false, 1e9, false,
     "extra cost of cascade's prefix pass and merge kernels per layer (ns)"},
    {"cascade_merge_ns_per_request_layer", &P::cascade_merge_ns_per_request_layer, 0, false, 1e9,
     false, "cascade merge cost per request and layer (ns)"},
    {"step_fixed_ns", &P::step_fixed_ns, 0, false, 1e12, false, "fixed cost per step (ns)"},
    {"layer_fixed_ns", &P::layer_fixed_ns, 0, false, 1e9, false,
     "fixed cost per layer and step (ns)"},
    {"per_request_ns", &P::per_request_ns, 0, false, 1e9, false, "cost per request and step (ns)"},
}};

std::string FormatNumber(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Reads `parameters.<name>`: {value: X, source: spec|assumed|measured, note: "..."}.
void ReadParameter(MapReader& parameters, const ProfileParameterInfo& info,
                   DeviceProfile::Origin& origin, DeviceProfile& profile) {
  const std::string name(info.name);
  const YAML::Node node = parameters.Value(name, true);
  if (!node.IsDefined()) return;
  if (!node.IsMap()) {
    parameters.Add(node, name, "expected a map {value, source, note}, got " + Describe(node));
    return;
  }
  MapReader entry(parameters.problems(), node, parameters.Join(name));
  const YAML::Node value = entry.Value("value", true);
  if (value.IsDefined()) {
    const std::string text = value.IsScalar() ? value.Scalar() : std::string();
    const std::optional<double> parsed = value.IsScalar() ? ParseReal(text) : std::nullopt;
    if (!parsed) {
      entry.Add(value, "value", "expected a number, got " + Describe(value));
    } else {
      const double number = *parsed;
      const bool below = info.min_exclusive ? number <= info.min : number < info.min;
      if (below || number > info.max) {
        entry.Add(value, "value",
                  "value " + text + " out of range: must be in " +
                      (info.min_exclusive ? "(" : "[") + FormatNumber(info.min) + ", " +
                      FormatNumber(info.max) + "] (" + std::string(info.meaning) + ")");
      } else if (info.integer && number != std::floor(number)) {
        entry.Add(value, "value", "value " + text + " must be an integer");
      } else {
        profile.*info.field = number;
      }
    }
  }
  const YAML::Node source = entry.Value("source", true);
  if (source.IsDefined()) {
    const std::string text = source.IsScalar() ? source.Scalar() : std::string();
    if (text == "spec") {
      origin.source = ParameterSource::kSpec;
    } else if (text == "assumed") {
      origin.source = ParameterSource::kAssumed;
    } else if (text == "measured") {
      origin.source = ParameterSource::kMeasured;
    } else {
      entry.Add(source, "source", "expected spec | assumed | measured, got " + Describe(source));
    }
  }
  entry.String("note", origin.note, true);
}

}  // namespace

std::string_view ParameterSourceName(ParameterSource source) {
  switch (source) {
    case ParameterSource::kSpec:
      return "spec";
    case ParameterSource::kAssumed:
      return "assumed";
    case ParameterSource::kMeasured:
      return "measured";
  }
  return "unknown";
}

std::span<const ProfileParameterInfo> ProfileParameters() { return kParameters; }

DeviceProfile ParseDeviceProfile(std::string_view yaml_text, const std::string& display_name) {
  const YAML::Node doc = ParseYaml(yaml_text, display_name);
  if (!doc.IsMap()) {
    throw InputError(display_name, LineOf(doc), "",
                     "a device profile is a YAML map of keys, got " + Describe(doc));
  }
  YamlProblems problems(display_name);
  DeviceProfile profile;
  MapReader root(problems, doc, "");
  root.String("name", profile.name, true);
  root.String("device", profile.device, true);
  root.String("notes", profile.notes, false);

  const YAML::Node provenance = root.Value("provenance", true);
  if (provenance.IsDefined()) {
    if (!provenance.IsSequence() || provenance.size() == 0) {
      root.Add(provenance, "provenance",
               "expected a non-empty list of sources, got " + Describe(provenance));
    } else {
      for (size_t i = 0; i < provenance.size(); ++i) {
        const YAML::Node item = provenance[i];
        if (!item.IsScalar() || item.Scalar().empty()) {
          root.Add(item, "provenance[" + std::to_string(i) + "]",
                   "expected a non-empty string, got " + Describe(item));
        } else {
          profile.provenance.push_back(item.Scalar());
        }
      }
    }
  }

  const YAML::Node parameters = root.Value("parameters", true);
  if (parameters.IsDefined()) {
    if (!parameters.IsMap()) {
      root.Add(parameters, "parameters",
               "expected a map of parameters, got " + Describe(parameters));
    } else {
      MapReader reader(problems, parameters, "parameters");
      for (size_t i = 0; i < kParameters.size(); ++i) {
        ReadParameter(reader, kParameters[i], profile.origins[i], profile);
      }
    }
  }
  root.Finish();
  if (!problems.empty()) throw InputError(problems.Take());
  return profile;
}

DeviceProfile LoadDeviceProfile(const std::string& path) {
  return ParseDeviceProfile(ReadTextFile(path, "device profile"), path);
}

}  // namespace feather
