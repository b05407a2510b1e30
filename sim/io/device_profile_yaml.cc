// device_profile_yaml.cc: the YAML loader and writer for device profiles.
//
// The loader reads every field before it throws, so one InputError lists every problem of the
// file (missing, mistyped, out of range, unknown or duplicate keys, bad `source`), each with its
// 1-based line and dotted key path ("parameters.dram_bw_bytes_per_s.value"). The writer
// (DeviceProfileToYaml) formats by hand: double-quoted strings, shortest round-trip numbers.
#include "sim/io/device_profile_yaml.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "base/input_error.h"
#include "sim/io/yaml_map_reader.h"

namespace feather {
namespace {

using P = DeviceProfile;

std::string FormatNumber(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Reads `parameters.<name>`: {value: X, source: spec|assumed|measured, note: "..."}.
void ReadParameter(MapReader& parameters, const ProfileParameterInfo& info,
                   DeviceProfile::Origin& origin, DeviceProfile& profile) {
  const std::string name(info.name);
  const YAML::Node node = parameters.Value(name, !info.optional);
  if (!node.IsDefined()) {
    if (info.optional) origin.note = "absent from the file: 0";
    return;
  }
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
    } else if (text == "published") {
      origin.source = ParameterSource::kPublished;
    } else {
      entry.Add(source, "source",
                "expected spec | assumed | measured | published, got " + Describe(source));
    }
  }
  entry.String("note", origin.note, true);
}

// --- Calibration sections (measured_on, fit) ---

constexpr int64_t kMaxRows = 1'000'000'000'000;
constexpr double kMaxMape = 1e9;  // a fraction; any finite value >= 0 is an honest error

// Exactly YYYY-MM-DDTHH:MM:SSZ with plausible field ranges (what hw/host_info.h writes).
bool IsUtcTimestamp(const std::string& text) {
  if (text.size() != 20) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    char expected = 'd';  // a digit
    if (i == 4 || i == 7) expected = '-';
    if (i == 10) expected = 'T';
    if (i == 13 || i == 16) expected = ':';
    if (i == 19) expected = 'Z';
    if (expected == 'd' ? (c < '0' || c > '9') : c != expected) return false;
  }
  auto field = [&text](size_t at) { return (text[at] - '0') * 10 + (text[at + 1] - '0'); };
  const int month = field(5), day = field(8), hour = field(11), minute = field(14);
  const int second = field(17);
  return month >= 1 && month <= 12 && day >= 1 && day <= 31 && hour <= 23 && minute <= 59 &&
         second <= 60;
}

void ReadMeasuredOn(MapReader& root, DeviceProfile& profile) {
  const std::optional<YAML::Node> node = root.Child("measured_on");
  if (!node) return;
  ProfileMeasuredOn m;
  MapReader reader(root.problems(), *node, "measured_on");
  reader.String("host", m.host, true);
  reader.String("cpu_model", m.cpu_model, true);
  reader.String("date_utc", m.date_utc, true);
  if (!m.date_utc.empty() && !IsUtcTimestamp(m.date_utc)) {
    reader.Add(reader.Value("date_utc"), "date_utc",
               "expected an ISO 8601 UTC time YYYY-MM-DDTHH:MM:SSZ, got '" + m.date_utc + "'");
  }
  if (const std::optional<YAML::Node> build = reader.Child("build", true)) {
    MapReader b(root.problems(), *build, reader.Join("build"));
    b.String("compiler", m.build.compiler, true);
    b.String("build_type", m.build.build_type, true);
    b.String("git_rev", m.build.git_rev, true);
  }
  reader.String("kernel_variant", m.kernel_variant, true);
  reader.Integer("threads", m.threads, 1, 1'000'000, true);
  reader.Integer("usable_cpus", m.usable_cpus, 1, 1'000'000);
  reader.String("cpu_signature", m.cpu_signature);
  reader.Integer("l3_cache_bytes", m.l3_cache_bytes, 1, int64_t{1} << 50);
  reader.Real("read_bw_bytes_per_s", m.read_bw_bytes_per_s, 0, 1e15, true);
  reader.Real("read_bw_low_bytes_per_s", m.read_bw_low_bytes_per_s, 0, 1e15, true);
  if (m.read_bw_low_bytes_per_s > 0 && m.read_bw_bytes_per_s > 0 &&
      m.read_bw_low_bytes_per_s > m.read_bw_bytes_per_s) {
    reader.Add(reader.Value("read_bw_low_bytes_per_s"), "read_bw_low_bytes_per_s",
               "the slowest read is above the fastest (read_bw_bytes_per_s)");
  }
  reader.String("probes", m.probes);
  reader.Integer("decode_prefetch_bytes", m.decode_prefetch_bytes, 1, int64_t{1} << 30);
  reader.String("gemm_weights", m.gemm_weights);
  if (!m.gemm_weights.empty() && m.gemm_weights != "packed" && m.gemm_weights != "row-major") {
    reader.Add(reader.Value("gemm_weights"), "gemm_weights",
               "expected packed or row-major, got '" + m.gemm_weights + "'");
  }
  reader.String("row_order", m.row_order);
  if (!m.row_order.empty() && m.row_order != "primed" && m.row_order != "interleaved") {
    reader.Add(reader.Value("row_order"), "row_order",
               "expected primed or interleaved, got '" + m.row_order + "'");
  }
  if (!m.probes.empty() && m.probes != "full" && m.probes != "quick") {
    reader.Add(reader.Value("probes"), "probes", "expected full or quick, got '" + m.probes + "'");
  }
  reader.Integer("block_tokens", m.block_tokens, 1, 1 << 16);
  profile.measured_on = std::move(m);
}

// A hold-out figure (`holdout_mape`, `holdout_noise_floor`): absent when `holdout_rows` is 0 (a
// holdout figure needs rows), required beside rows when `required` (holdout_mape; the noise
// floor is optional). `holdout_rows` is -1 when it was missing or bad (then nothing more is said
// about it).
void ReadHoldoutFigure(MapReader& reader, const std::string& key, int64_t holdout_rows,
                       bool required, std::optional<double>& out) {
  const YAML::Node node = reader.Value(key, required && holdout_rows > 0);  // missing: a problem
  if (!node.IsDefined() || node.IsNull()) return;
  if (holdout_rows == 0) {
    reader.Add(node, key, "must be absent when holdout_rows is 0");
    return;
  }
  double value = -1;
  reader.Real(key, value, 0, kMaxMape);
  if (value >= 0) out = value;
}

// Reads `<rows_key>` (>= min_rows) and `holdout_rows`, then `<mape_key>` and `holdout_mape`.
void ReadRowsAndMapes(MapReader& reader, const std::string& rows_key, int64_t min_rows,
                      uint64_t& rows, uint64_t& holdout_rows, const std::string& mape_key,
                      double& mape, std::optional<double>& holdout_mape,
                      std::optional<double>& holdout_noise_floor) {
  int64_t count = -1;
  reader.Integer(rows_key, count, min_rows, kMaxRows, true);
  if (count >= 0) rows = static_cast<uint64_t>(count);
  int64_t held = -1;
  reader.Integer("holdout_rows", held, 0, kMaxRows, true);
  if (held >= 0) holdout_rows = static_cast<uint64_t>(held);
  reader.Real(mape_key, mape, 0, kMaxMape, false, true);
  ReadHoldoutFigure(reader, "holdout_mape", held, true, holdout_mape);
  ReadHoldoutFigure(reader, "holdout_noise_floor", held, false, holdout_noise_floor);
}

void ReadFit(MapReader& root, DeviceProfile& profile) {
  const std::optional<YAML::Node> node = root.Child("fit");
  if (!node) return;
  ProfileFit fit;
  MapReader reader(root.problems(), *node, "fit");
  // fit_rows may be 0: a refit on published term rows (calib/published_rows.h) has no whole step.
  ReadRowsAndMapes(reader, "fit_rows", 0, fit.fit_rows, fit.holdout_rows, "fit_mape", fit.fit_mape,
                   fit.holdout_mape, fit.holdout_noise_floor);
  // `terms: {}` (nothing fitted) is a valid, empty map; Child() would read it as absent.
  const YAML::Node terms = reader.Value("terms", true);
  if (terms.IsDefined() && !terms.IsNull() && !terms.IsMap()) {
    reader.Add(terms, "terms", "expected a map of terms, got " + Describe(terms));
  } else if (terms.IsMap()) {
    MapReader term_reader(root.problems(), terms, reader.Join("terms"));
    for (const std::string_view name :
         ProfileFitTermNames()) {  // StepTerm order, whatever the file's
      const std::string key(name);
      const std::optional<YAML::Node> term = term_reader.Child(key);
      if (!term) continue;
      ProfileTermFit t;
      t.term = key;
      MapReader entry(root.problems(), *term, term_reader.Join(key));
      ReadRowsAndMapes(entry, "rows", 1, t.rows, t.holdout_rows, "mape", t.mape, t.holdout_mape,
                       t.holdout_noise_floor);
      fit.terms.push_back(std::move(t));
    }
  }
  profile.fit = std::move(fit);
}

// `step_noise`: {source, note, steps, repetitions, terms: {TERM: {rel_stdev, rms, p05, p95,
// samples, drift_rel_stdev (optional, default 0)}}}.
void ReadStepNoise(MapReader& root, DeviceProfile& profile) {
  const std::optional<YAML::Node> node = root.Child("step_noise");
  if (!node) return;
  ProfileStepNoise noise;
  MapReader reader(root.problems(), *node, "step_noise");
  std::string source;
  if (reader.Value("source", true).IsDefined()) {
    reader.Choice(
        "source", source,
        std::initializer_list<std::string_view>{"spec", "assumed", "measured", "published"});
  }
  if (source == "spec") noise.source = ParameterSource::kSpec;
  if (source == "assumed") noise.source = ParameterSource::kAssumed;
  if (source == "published") noise.source = ParameterSource::kPublished;
  reader.String("note", noise.note, true);
  reader.Integer("steps", noise.steps, 1, kMaxRows, true);
  reader.Integer("repetitions", noise.repetitions, 1, 1'000'000, true);
  // `terms: {}` is a valid, empty map (as in `fit`).
  const YAML::Node terms = reader.Value("terms", true);
  if (terms.IsDefined() && !terms.IsNull() && !terms.IsMap()) {
    reader.Add(terms, "terms", "expected a map of terms, got " + Describe(terms));
  } else if (terms.IsMap()) {
    MapReader term_reader(root.problems(), terms, reader.Join("terms"));
    for (const std::string_view name : ProfileFitTermNames()) {
      const std::string key(name);
      const std::optional<YAML::Node> term = term_reader.Child(key);
      if (!term) continue;
      ProfileTermNoise t;
      t.term = key;
      MapReader entry(root.problems(), *term, term_reader.Join(key));
      entry.Real("rel_stdev", t.rel_stdev, 0, 1e6, false, true);
      entry.Real("rms", t.rms, 0, 1e6, false, true);
      entry.Real("p05", t.p05, -1, 1e6, false, true);
      entry.Real("p95", t.p95, -1, 1e6, false, true);
      entry.Integer("samples", t.samples, 1, kMaxRows, true);
      entry.Real("drift_rel_stdev", t.drift_rel_stdev, 0, 1e6, false, false);
      if (t.p95 < t.p05) {
        entry.Add(entry.Value("p95"), "p95",
                  "p95 " + FormatNumber(t.p95) + " is below p05 " + FormatNumber(t.p05));
      }
      noise.terms.push_back(std::move(t));
    }
  }
  profile.step_noise = std::move(noise);
}

// --- Writer ---

// The shortest text that from_chars reads back to the same double.
std::string ExactNumber(double value) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return ec == std::errc() ? std::string(buffer, end) : std::string("nan");
}

// A YAML double-quoted scalar: quotes, backslashes and control characters escaped.
std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"') {
      out += "\\\"";
    } else if (ch == '\\') {
      out += "\\\\";
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02X", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += ch;
    }
  }
  out += '"';
  return out;
}

void WriteRowsAndMapes(std::string& out, const std::string& indent, const std::string& rows_key,
                       uint64_t rows, uint64_t holdout_rows, const std::string& mape_key,
                       double mape, const std::optional<double>& holdout_mape,
                       const std::optional<double>& holdout_noise_floor) {
  out += indent + rows_key + ": " + std::to_string(rows) + "\n";
  out += indent + "holdout_rows: " + std::to_string(holdout_rows) + "\n";
  out += indent + mape_key + ": " + ExactNumber(mape) + "\n";
  if (holdout_mape) out += indent + "holdout_mape: " + ExactNumber(*holdout_mape) + "\n";
  if (holdout_noise_floor) {
    out += indent + "holdout_noise_floor: " + ExactNumber(*holdout_noise_floor) + "\n";
  }
}

}  // namespace

DeviceProfile ParseDeviceProfile(std::string_view yaml_text, const std::string& display_name) {
  const YAML::Node doc = ParseYaml(yaml_text, display_name);
  if (doc.IsNull()) {  // an empty file, or only comments
    throw InputError(display_name, 1, "name",
                     "missing (required): the file is empty; a device profile is a YAML map with "
                     "name, device, provenance and parameters");
  }
  if (!doc.IsMap()) {
    throw InputError(display_name, std::max<uint32_t>(LineOf(doc), 1), "",
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
      for (size_t i = 0; i < ProfileParameters().size(); ++i) {
        ReadParameter(reader, ProfileParameters()[i], profile.origins[i], profile);
      }
    }
  }
  ReadMeasuredOn(root, profile);
  ReadFit(root, profile);
  ReadStepNoise(root, profile);
  root.Finish();
  if (!problems.empty()) throw InputError(problems.Take());
  return profile;
}

DeviceProfile LoadDeviceProfile(const std::string& path) {
  return ParseDeviceProfile(ReadTextFile(path, "device profile"), path);
}

std::string DeviceProfileToYaml(const DeviceProfile& profile) {
  std::string out =
      "# Device profile written by DeviceProfileToYaml (sim/engine/device_profile.h); schema:\n"
      "# results/profiles/README.md.\n";
  out += "name: " + Quote(profile.name) + "\n";
  out += "device: " + Quote(profile.device) + "\n";
  if (!profile.notes.empty()) out += "notes: " + Quote(profile.notes) + "\n";
  if (profile.provenance.empty()) {
    out += "provenance: []\n";
  } else {
    out += "provenance:\n";
    for (const std::string& source : profile.provenance) out += "  - " + Quote(source) + "\n";
  }
  if (const std::optional<ProfileMeasuredOn>& m = profile.measured_on) {
    out += "measured_on:\n";
    out += "  host: " + Quote(m->host) + "\n";
    out += "  cpu_model: " + Quote(m->cpu_model) + "\n";
    out += "  date_utc: " + Quote(m->date_utc) + "\n";
    out += "  build:\n";
    out += "    compiler: " + Quote(m->build.compiler) + "\n";
    out += "    build_type: " + Quote(m->build.build_type) + "\n";
    out += "    git_rev: " + Quote(m->build.git_rev) + "\n";
    out += "  kernel_variant: " + Quote(m->kernel_variant) + "\n";
    out += "  threads: " + std::to_string(m->threads) + "\n";
    if (m->usable_cpus > 0) out += "  usable_cpus: " + std::to_string(m->usable_cpus) + "\n";
    if (!m->cpu_signature.empty()) out += "  cpu_signature: " + Quote(m->cpu_signature) + "\n";
    if (m->l3_cache_bytes > 0) {
      out += "  l3_cache_bytes: " + std::to_string(m->l3_cache_bytes) + "\n";
    }
    if (m->read_bw_bytes_per_s > 0) {
      out += "  read_bw_bytes_per_s: " + FormatNumber(m->read_bw_bytes_per_s) + "\n";
    }
    if (m->read_bw_low_bytes_per_s > 0) {
      out += "  read_bw_low_bytes_per_s: " + FormatNumber(m->read_bw_low_bytes_per_s) + "\n";
    }
    if (!m->probes.empty()) out += "  probes: " + m->probes + "\n";
    if (m->decode_prefetch_bytes > 0) {
      out += "  decode_prefetch_bytes: " + std::to_string(m->decode_prefetch_bytes) + "\n";
    }
    if (!m->gemm_weights.empty()) out += "  gemm_weights: " + m->gemm_weights + "\n";
    if (!m->row_order.empty()) out += "  row_order: " + m->row_order + "\n";
    if (m->block_tokens > 0) out += "  block_tokens: " + std::to_string(m->block_tokens) + "\n";
  }
  if (const std::optional<ProfileFit>& fit = profile.fit) {
    out += "fit:\n";
    WriteRowsAndMapes(out, "  ", "fit_rows", fit->fit_rows, fit->holdout_rows, "fit_mape",
                      fit->fit_mape, fit->holdout_mape, fit->holdout_noise_floor);
    out += fit->terms.empty() ? "  terms: {}\n" : "  terms:\n";
    for (const ProfileTermFit& t : fit->terms) {
      out += "    " + t.term + ":\n";
      WriteRowsAndMapes(out, "      ", "rows", t.rows, t.holdout_rows, "mape", t.mape,
                        t.holdout_mape, t.holdout_noise_floor);
    }
  }
  if (const std::optional<ProfileStepNoise>& noise = profile.step_noise) {
    out += "step_noise:\n";
    out += "  source: " + std::string(ParameterSourceName(noise->source)) + "\n";
    out += "  note: " + Quote(noise->note) + "\n";
    out += "  steps: " + std::to_string(noise->steps) + "\n";
    out += "  repetitions: " + std::to_string(noise->repetitions) + "\n";
    out += noise->terms.empty() ? "  terms: {}\n" : "  terms:\n";
    for (const ProfileTermNoise& t : noise->terms) {
      out += "    " + t.term + ":\n";
      out += "      rel_stdev: " + ExactNumber(t.rel_stdev) + "\n";
      out += "      rms: " + ExactNumber(t.rms) + "\n";
      out += "      p05: " + ExactNumber(t.p05) + "\n";
      out += "      p95: " + ExactNumber(t.p95) + "\n";
      out += "      samples: " + std::to_string(t.samples) + "\n";
      // Written only when measured: profiles from before the key read it as 0.
      if (t.drift_rel_stdev != 0) {
        out += "      drift_rel_stdev: " + ExactNumber(t.drift_rel_stdev) + "\n";
      }
    }
  }
  out += "parameters:\n";
  for (size_t i = 0; i < ProfileParameters().size(); ++i) {
    const ProfileParameterInfo& info = ProfileParameters()[i];
    const DeviceProfile::Origin& origin = profile.origins[i];
    const double value = profile.*info.field;
    if (info.integer && value != std::floor(value)) {
      // The reader refuses it, so a profile written with it could never be read back.
      throw std::logic_error("DeviceProfileToYaml: parameter " + std::string(info.name) + " is " +
                             ExactNumber(value) +
                             ", not an integer; round it where the profile sets it");
    }
    out += "  " + std::string(info.name) + ":\n";
    out += "    value: " + ExactNumber(value) + "\n";
    out += "    source: " + std::string(ParameterSourceName(origin.source)) + "\n";
    out += "    note: " + Quote(origin.note) + "\n";
  }
  return out;
}

}  // namespace feather
