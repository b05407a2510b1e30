// device_profile.cc: the parameter table of the cost model and the YAML loader for profiles.
//
// The loader reads every field before it throws, so one InputError lists every problem of the
// file (missing, mistyped, out of range, unknown or duplicate keys, bad `source`), each with its
// 1-based line and dotted key path ("parameters.dram_bw_bytes_per_s.value").
#include "sim/device_profile.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "sim/input_error.h"

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

uint32_t LineOf(const YAML::Node& node) {
  return node.IsDefined() ? static_cast<uint32_t>(node.Mark().line + 1) : 0;
}

std::string Describe(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "nothing";
}

std::string FormatNumber(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Reads one YAML map field by field, recording problems instead of throwing; `prefix` is the
// dotted path of the map ("" for the top level).
class MapReader {
 public:
  MapReader(std::string file, const YAML::Node& map, std::string prefix,
            std::vector<InputProblem>& problems)
      : file_(std::move(file)), map_(map), prefix_(std::move(prefix)), problems_(problems) {
    std::set<std::string> seen;
    for (const auto& entry : map_) {
      const std::string key = entry.first.Scalar();
      if (!seen.insert(key).second) Add(entry.first, key, "duplicate key");
    }
  }

  [[nodiscard]] std::string Path(const std::string& key) const {
    return prefix_.empty() ? key : prefix_ + "." + key;
  }

  YAML::Node Get(const std::string& key, bool required) {
    known_.insert(key);
    for (const auto& entry : map_) {
      if (entry.first.Scalar() == key) return entry.second;
    }
    if (required) Add(map_, key, "missing (required)");
    return YAML::Node(YAML::NodeType::Undefined);
  }

  void String(const std::string& key, std::string& out, bool required) {
    const YAML::Node node = Get(key, required);
    if (!node.IsDefined()) return;
    if (!node.IsScalar() || node.Scalar().empty()) {
      Add(node, key, "expected a non-empty string, got " + Describe(node));
      return;
    }
    out = node.Scalar();
  }

  void Add(const YAML::Node& at, const std::string& key, std::string message) {
    problems_.push_back({file_, LineOf(at), Path(key), std::move(message)});
  }

  void ReportUnknown(std::string_view allowed) {
    for (const auto& entry : map_) {
      const std::string key = entry.first.Scalar();
      if (known_.count(key) == 0) {
        Add(entry.first, key, "unknown key (allowed: " + std::string(allowed) + ")");
      }
    }
  }

  [[nodiscard]] const YAML::Node& node() const { return map_; }

 private:
  std::string file_;
  YAML::Node map_;
  std::string prefix_;
  std::vector<InputProblem>& problems_;
  std::set<std::string> known_;
};

// Reads `parameters.<name>`: {value: X, source: spec|assumed|measured, note: "..."}.
void ReadParameter(MapReader& parameters, const ProfileParameterInfo& info,
                   DeviceProfile::Origin& origin, DeviceProfile& profile, const std::string& file,
                   std::vector<InputProblem>& problems) {
  const std::string name(info.name);
  const YAML::Node node = parameters.Get(name, true);
  if (!node.IsDefined()) return;
  if (!node.IsMap()) {
    parameters.Add(node, name, "expected a map {value, source, note}, got " + Describe(node));
    return;
  }
  MapReader entry(file, node, parameters.Path(name), problems);
  const YAML::Node value = entry.Get("value", true);
  if (value.IsDefined()) {
    const std::string text = value.IsScalar() ? value.Scalar() : std::string();
    double number = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, number);
    if (!value.IsScalar() || ec != std::errc() || ptr != end || !std::isfinite(number)) {
      entry.Add(value, "value", "expected a number, got " + Describe(value));
    } else {
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
  const YAML::Node source = entry.Get("source", true);
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
  entry.ReportUnknown("value, source, note");
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
  YAML::Node doc;
  try {
    doc = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    throw InputError(display_name, static_cast<uint32_t>(e.mark.line + 1), "",
                     "YAML syntax error: " + e.msg);
  }
  if (!doc.IsMap()) {
    throw InputError(display_name, LineOf(doc), "",
                     "a device profile is a YAML map of keys, got " + Describe(doc));
  }
  std::vector<InputProblem> problems;
  DeviceProfile profile;
  MapReader root(display_name, doc, "", problems);
  root.String("name", profile.name, true);
  root.String("device", profile.device, true);
  root.String("notes", profile.notes, false);

  const YAML::Node provenance = root.Get("provenance", true);
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

  const YAML::Node parameters = root.Get("parameters", true);
  if (parameters.IsDefined()) {
    if (!parameters.IsMap()) {
      root.Add(parameters, "parameters",
               "expected a map of parameters, got " + Describe(parameters));
    } else {
      MapReader reader(display_name, parameters, "parameters", problems);
      std::string allowed;
      for (size_t i = 0; i < kParameters.size(); ++i) {
        ReadParameter(reader, kParameters[i], profile.origins[i], profile, display_name, problems);
        allowed += (i == 0 ? "" : ", ") + std::string(kParameters[i].name);
      }
      reader.ReportUnknown(allowed);
    }
  }
  root.ReportUnknown("name, device, notes, provenance, parameters");
  if (!problems.empty()) throw InputError(std::move(problems));
  return profile;
}

DeviceProfile LoadDeviceProfile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, 0, "", "cannot open the device profile");
  std::ostringstream text;
  text << in.rdbuf();
  return ParseDeviceProfile(text.str(), path);
}

}  // namespace feather
