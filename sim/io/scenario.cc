// scenario.cc: YAML scenario loading and validation (schema: scenarios/README.md).
//
// The shared MapReader (yaml_map_reader.h) walks the tree key by key and collects every problem
// of the file; the name <-> enum tables below serve both reading and the JSON echo.
#include "sim/io/scenario.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "base/input_error.h"
#include "base/types.h"
#include "policies/config_fields.h"
#include "policies/selector.h"
#include "sim/io/embedded_files.h"
#include "sim/io/yaml_map_reader.h"

namespace feather {
namespace {

namespace fs = std::filesystem;

// Hard ceilings of the representation (32-bit request ids and token counts); the memory limits
// below them are WorkloadLimits, which a scenario's `limits:` section raises.
constexpr int64_t kHardMaxRequests = int64_t{kNoRequest} - 1;
constexpr int64_t kHardMaxPromptTokens = (int64_t{1} << 31) - 1;
constexpr int64_t kHardMaxTotalTokens = int64_t{1} << 40;
constexpr int64_t kMaxOutputTokens = 1'000'000;

// Scenario names of the enums, for reading and for the echo.
template <typename Enum>
using NameEntry = std::pair<std::string_view, Enum>;
constexpr NameEntry<LengthKind> kLengthKinds[] = {{"fixed", LengthKind::kFixed},
                                                  {"uniform", LengthKind::kUniform},
                                                  {"lognormal", LengthKind::kLognormal}};
constexpr NameEntry<ArrivalKind> kArrivalKinds[] = {{"poisson", ArrivalKind::kPoisson},
                                                    {"piecewise", ArrivalKind::kPiecewise},
                                                    {"offline", ArrivalKind::kOffline}};
constexpr NameEntry<SharingKind> kSharingKinds[] = {{"groups", SharingKind::kGroups},
                                                    {"radix", SharingKind::kRadix},
                                                    {"fractional", SharingKind::kFractional},
                                                    {"two-prefixes", SharingKind::kTwoPrefixes},
                                                    {"none", SharingKind::kNone}};
constexpr NameEntry<GroupSizes> kGroupSizes[] = {{"equal", GroupSizes::kEqual},
                                                 {"zipf", GroupSizes::kZipf},
                                                 {"exact", GroupSizes::kExact}};
constexpr NameEntry<StateBins> kStateBins[] = {{"authors", StateBins::kAuthors},
                                               {"exponential", StateBins::kExponential},
                                               {"cascade", StateBins::kCascade}};
constexpr NameEntry<ServingEngine> kServingEngines[] = {{"vllm", ServingEngine::kVllm},
                                                        {"sglang", ServingEngine::kSglang}};
constexpr NameEntry<SchedulerTimeMode> kSchedulerTimes[] = {
    {"measured", SchedulerTimeMode::kMeasured},
    {"zero", SchedulerTimeMode::kZero},
    {"fixed", SchedulerTimeMode::kFixed},
    {"engine", SchedulerTimeMode::kEngine}};

template <typename Enum, size_t N>
std::string_view NameOf(const NameEntry<Enum> (&table)[N], Enum value) {
  for (const auto& [name, v] : table) {
    if (v == value) return name;
  }
  return "?";
}

// Resolves a path from the file (relative to its directory) or from --set (relative to cwd).
std::string ResolvePath(const std::string& value, const std::string& key,
                        const YamlProblems& problems, const std::string& base_dir) {
  if (value.empty() || fs::path(value).is_absolute() || problems.FromOverride(key)) return value;
  return (fs::path(base_dir) / value).lexically_normal().string();
}

// Why `name` cannot name a run (nullopt when it can). The default output folder is out/<name>,
// so a name is one plain path component: no separator, nothing that climbs or hides.
std::optional<std::string> ScenarioNameProblem(const std::string& name) {
  constexpr size_t kMaxNameBytes = 200;  // room for ".partial-<pid>" within NAME_MAX (255)
  const char* rule =
      "; a name is one plain path component (no '/', '\\' or control characters, not "
      "starting with '.'), since runs go to out/<name>";
  if (name.size() > kMaxNameBytes) {
    return "is " + std::to_string(name.size()) + " bytes long, over " +
           std::to_string(kMaxNameBytes) + rule;
  }
  if (name.empty()) return "is empty" + std::string(rule);
  if (name == "." || name == "..") return "'" + name + "' climbs out of out/" + rule;
  if (name.front() == '.') return "starts with '.'" + std::string(rule);
  for (const char c : name) {
    if (c == '/' || c == '\\') return std::string("contains a path separator '") + c + "'" + rule;
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
      return "contains a control character" + std::string(rule);
    }
  }
  return std::nullopt;
}

bool IsShortName(const std::string& value) {
  return value.find('/') == std::string::npos &&
         !(value.size() > 5 && value.compare(value.size() - 5, 5, ".yaml") == 0);
}

void ReadLength(MapReader& parent, const std::string& key, LengthSpec& out, int64_t max_tokens) {
  const YAML::Node v = parent.Value(key);
  if (!v.IsDefined() || v.IsNull()) return;
  if (v.IsScalar()) {  // shorthand: a fixed length
    const std::optional<int64_t> parsed = ParseInteger(v.Scalar());
    if (!parsed || *parsed < 1 || *parsed > max_tokens) {
      parent.problems().Add(v, parent.Join(key),
                            "expected a token count in [1, " + std::to_string(max_tokens) +
                                "] or a map {kind: fixed|uniform|lognormal, ...}, got " +
                                Describe(v));
      return;
    }
    out = LengthSpec{};
    out.kind = LengthKind::kFixed;
    out.value = static_cast<uint32_t>(*parsed);
    return;
  }
  if (!v.IsMap()) {
    parent.problems().Add(v, parent.Join(key), "expected a number or a map, got " + Describe(v));
    return;
  }
  MapReader m(parent.problems(), v, parent.Join(key));
  m.EnumChoice("kind", out.kind, kLengthKinds);
  m.Integer("value", out.value, 1, max_tokens);
  m.Integer("min", out.min, 1, max_tokens);
  m.Integer("max", out.max, 1, max_tokens);
  m.Real("mean", out.mean, 0, static_cast<double>(max_tokens), true);
  m.Real("sigma", out.sigma, 0, 10);
  if (out.kind != LengthKind::kFixed && out.min > out.max) {
    m.problems().Add(
        m.Value("min"), m.Join("min"),
        "min (" + std::to_string(out.min) + ") exceeds max (" + std::to_string(out.max) + ")");
  }
}

void ReadLimits(MapReader& root, Scenario& s) {
  const std::optional<YAML::Node> node = root.Child("limits");
  if (!node) return;
  MapReader m(root.problems(), *node, "limits");
  WorkloadLimits& l = s.workload.limits;
  m.Integer("max_requests", l.max_requests, 1, kHardMaxRequests);
  m.Integer("max_prompt_tokens", l.max_prompt_tokens, 1, kHardMaxPromptTokens);
  m.Integer("max_total_tokens", l.max_total_tokens, 1, kHardMaxTotalTokens);
  m.Bool("allow_unservable", l.allow_unservable);
}

// 1234567 -> "1,234,567" (the limits' messages quote big counts).
std::string WithThousands(double value) {
  const std::string digits = std::to_string(static_cast<uint64_t>(std::llround(value)));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string HowToRaise(const char* limit) {
  return std::string(" (limits.") + limit + "); raise it with `limits: {" + limit +
         ": N}` in the scenario or --set limits." + limit + "=N";
}

// The value of the first of `keys` present in `map` (a problem's line), else `map` itself.
// Read-only: never marks or inserts keys.
YAML::Node NodeOfFirst(const YAML::Node& map, std::initializer_list<std::string_view> keys) {
  if (map.IsMap()) {
    for (const std::string_view key : keys) {
      for (const auto& entry : map) {
        if (entry.first.Scalar() == key) return entry.second;
      }
    }
  }
  return map;
}

// Consistency of the synthetic workload as a whole, and the memory limits (WorkloadLimits),
// checked before anything is generated. `workload` is the scenario's workload map.
void CheckSyntheticWorkload(YamlProblems& problems, const YAML::Node& workload, const Scenario& s) {
  const WorkloadSpec& spec = s.workload;
  const WorkloadLimits& limits = spec.limits;
  const SharingSpec& sh = spec.sharing;
  const YAML::Node sharing = NodeOfFirst(workload, {"sharing"});
  const YAML::Node arrival = NodeOfFirst(workload, {"arrival"});
  if (sh.kind == SharingKind::kRadix) {
    // A request's Oracle group is its leaf index, a 32-bit id.
    const double leaves = std::pow(static_cast<double>(sh.branching), sh.levels);
    if (leaves >= static_cast<double>(kNoPrefixGroup)) {
      problems.Add(NodeOfFirst(sharing, {"branching", "levels"}), "workload.sharing.branching",
                   "branching^levels = " + std::to_string(sh.branching) + "^" +
                       std::to_string(sh.levels) + " leaves; must be below 2^32");
    }
  }
  if (spec.requests > limits.max_requests) {
    problems.Add(
        NodeOfFirst(workload, {"requests"}), "workload.requests",
        WithThousands(static_cast<double>(spec.requests)) + " requests exceed the limit of " +
            WithThousands(static_cast<double>(limits.max_requests)) + HowToRaise("max_requests"));
    return;  // the estimates below would only repeat it
  }
  // Arrival times are 64-bit nanoseconds (~292 years): the last request arrives after about
  // requests / rate seconds.
  const auto too_slow = [&](double rate_per_s) {
    return static_cast<double>(spec.requests) / rate_per_s > 1e9;
  };
  if (spec.arrival.kind == ArrivalKind::kPoisson && too_slow(spec.arrival.rate_per_s)) {
    problems.Add(NodeOfFirst(arrival, {"rate"}), "workload.arrival.rate",
                 "at this rate " + std::to_string(spec.requests) +
                     " requests take over 10^9 s (31 years) to arrive; simulated time would "
                     "overflow");
  }
  if (spec.arrival.kind == ArrivalKind::kPiecewise && !spec.arrival.phases.empty() &&
      too_slow(spec.arrival.phases.back().rate_per_s)) {
    problems.Add(NodeOfFirst(arrival, {"phases"}), "workload.arrival.phases",
                 "the last phase's rate is too low for " + std::to_string(spec.requests) +
                     " requests: over 10^9 s (31 years) of arrivals; simulated time would "
                     "overflow");
  }
  const WorkloadSize size = EstimateWorkloadSize(spec);
  if (size.max_prompt_tokens > limits.max_prompt_tokens) {
    // Blame the length spec when it alone is over the limit, else the shared part.
    const LengthSpec& l = spec.prompt_tokens;
    const uint64_t unique_max = l.kind == LengthKind::kFixed ? l.value : l.max;
    const bool shared_part =
        unique_max <= limits.max_prompt_tokens &&
        (sh.kind == SharingKind::kGroups || sh.kind == SharingKind::kTwoPrefixes ||
         sh.kind == SharingKind::kRadix);
    const std::string message = "prompts of up to " +
                                WithThousands(static_cast<double>(size.max_prompt_tokens)) +
                                " tokens exceed the limit of " +
                                WithThousands(static_cast<double>(limits.max_prompt_tokens)) +
                                " tokens per prompt" + HowToRaise("max_prompt_tokens");
    if (shared_part) {
      const char* key = sh.kind == SharingKind::kRadix ? "level_tokens" : "prefix_tokens";
      problems.Add(NodeOfFirst(sharing, {key}), std::string("workload.sharing.") + key, message);
    } else {
      problems.Add(NodeOfFirst(workload, {"prompt_tokens"}), "workload.prompt_tokens", message);
    }
  } else if (size.expected_total_tokens > static_cast<double>(limits.max_total_tokens)) {
    problems.Add(
        NodeOfFirst(workload, {"requests"}), "workload.requests",
        WithThousands(static_cast<double>(spec.requests)) + " requests of about " +
            WithThousands(size.expected_total_tokens / static_cast<double>(spec.requests)) +
            " prompt tokens hold about " + WithThousands(size.expected_total_tokens) + " tokens (" +
            WithThousands(size.expected_total_tokens * 4e-6) +
            " MB of token ids), over the limit of " +
            WithThousands(static_cast<double>(limits.max_total_tokens)) + " tokens" +
            HowToRaise("max_total_tokens"));
  }
}

void ReadWorkload(MapReader& root, Scenario& s, const std::string& base_dir) {
  const std::optional<YAML::Node> node = root.Child("workload");
  if (!node) return;
  MapReader w(root.problems(), *node, "workload");
  WorkloadSpec& spec = s.workload;
  w.Integer("requests", spec.requests, 1, kHardMaxRequests);

  if (const auto arrival = w.Child("arrival")) {
    MapReader a(w.problems(), *arrival, "workload.arrival");
    a.EnumChoice("kind", spec.arrival.kind, kArrivalKinds);
    a.Real("rate", spec.arrival.rate_per_s, 0, 1e9, true);
    const YAML::Node phases = a.Value("phases");
    if (phases.IsDefined() && !phases.IsNull()) {
      if (!phases.IsSequence() || phases.size() == 0) {
        a.problems().Add(phases, "workload.arrival.phases",
                         "expected a non-empty list of {duration_s, rate}");
      } else {
        spec.arrival.phases.clear();
        for (size_t i = 0; i < phases.size(); ++i) {
          const std::string path = "workload.arrival.phases[" + std::to_string(i) + "]";
          if (!phases[i].IsMap()) {
            a.problems().Add(phases[i], path, "expected a map {duration_s, rate}");
            continue;
          }
          MapReader p(a.problems(), phases[i], path);
          RatePhase phase;
          p.Real("duration_s", phase.duration_s, 0, 1e9, true);
          p.Real("rate", phase.rate_per_s, 0, 1e9, true);
          spec.arrival.phases.push_back(phase);
        }
      }
    }
    if (spec.arrival.kind == ArrivalKind::kPiecewise && spec.arrival.phases.empty()) {
      a.problems().Add(a.Value("kind"), "workload.arrival.phases",
                       "kind piecewise needs a list of phases");
    }
  }

  if (const auto sharing = w.Child("sharing")) {
    MapReader p(w.problems(), *sharing, "workload.sharing");
    SharingSpec& sh = spec.sharing;
    p.EnumChoice("kind", sh.kind, kSharingKinds);
    p.Integer("groups", sh.groups, 1, 1'000'000);
    p.Integer("prefix_tokens", sh.prefix_tokens, 0, kHardMaxPromptTokens);
    p.EnumChoice("group_sizes", sh.group_sizes, kGroupSizes);
    p.Real("zipf_exponent", sh.zipf_exponent, 0, 10);
    p.Integer("levels", sh.levels, 1, 8);
    p.Integer("branching", sh.branching, 1, 64);
    p.Integer("level_tokens", sh.level_tokens, 1, kHardMaxPromptTokens);
    p.Real("shared_fraction", sh.shared_fraction, 0, 1);
  }
  ReadLength(w, "prompt_tokens", spec.prompt_tokens, kHardMaxPromptTokens);
  ReadLength(w, "output_tokens", spec.output_tokens, kMaxOutputTokens);

  if (const auto trace = w.Child("trace")) {
    MapReader t(w.problems(), *trace, "workload.trace");
    spec.use_trace = true;
    t.String("path", spec.trace.path);
    t.Real("time_scale", spec.trace.time_scale, 0, 1e6, true);
    t.Integer("limit", spec.trace.limit, 0, kHardMaxRequests);
    t.Integer("block_tokens", spec.trace.block_tokens, 1, 1 << 20);
    t.Bool("closed_loop", spec.trace.closed_loop);
    if (spec.trace.path.empty()) {
      t.problems().Add(*trace, "workload.trace.path", "missing: the trace file to replay");
    } else {
      spec.trace.path = ResolvePath(spec.trace.path, "workload.trace.path", t.problems(), base_dir);
      if (!fs::exists(spec.trace.path)) {
        t.problems().Add(t.Value("path"), "workload.trace.path",
                         "no such file: " + spec.trace.path);
      }
    }
    if (spec.trace.limit > spec.limits.max_requests) {
      t.Add(t.Value("limit"), "limit",
            WithThousands(static_cast<double>(spec.trace.limit)) +
                " requests exceed the limit of " +
                WithThousands(static_cast<double>(spec.limits.max_requests)) +
                HowToRaise("max_requests"));
    }
  }
}

// The knobs of a config's field table from the map `p` reads, with their ranges, then its
// cross-field rules, each blamed on a key the file (or --set) gave; ReadPolicyConfig does it for
// the map scheduler.<Config::kSection>. Rules are checked here, with a
// line, not first when the policy is built (a sweep validates every point up front this way).
template <class Config>
void ReadConfigFields(MapReader& p, Config& config) {
  ForEachField(config, [&](const ConfigField<Config>& field, auto& value) {
    using T = std::remove_reference_t<decltype(value)>;
    const std::string key(field.key);
    if constexpr (std::is_same_v<T, double>) {
      p.Real(key, value, field.range.real_min, field.range.real_max, field.range.min_exclusive);
    } else if constexpr (std::is_same_v<T, bool>) {
      p.Bool(key, value);
    } else {
      p.Integer(key, value, field.range.int_min, field.range.int_max);
    }
  });
  for (const ConfigRuleProblem& rule : config.RuleProblems()) {
    const std::string blamed(p.Value(std::string(rule.key)).IsDefined() ? rule.key
                                                                        : rule.other_key);
    p.Add(p.Value(blamed), blamed, rule.message);
  }
}
template <class Config>
void ReadPolicyConfig(MapReader& scheduler, Config& config) {
  const std::string section(Config::kSection);
  const std::optional<YAML::Node> node = scheduler.Child(section);
  if (!node) return;
  MapReader p(scheduler.problems(), *node, "scheduler." + section);
  ReadConfigFields(p, config);
}

// The config's knobs as the summary echoes them: the field table's keys, in its order.
template <class Config>
nlohmann::ordered_json PolicyConfigJson(const Config& config) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  ForEachField(config, [&](const ConfigField<Config>& field, const auto& value) {
    out[std::string(field.key)] = value;
  });
  return out;
}

void ReadScheduler(MapReader& root, Scenario& s, const std::string& base_dir) {
  const std::optional<YAML::Node> node = root.Child("scheduler");
  if (!node) return;
  MapReader m(root.problems(), *node, "scheduler");
  m.Choice("selector", s.selector, SelectorNames());
  m.Choice("stop", s.stop, StopPolicyNames());
  ReadConfigFields(m, s.selector_options);
  if (const auto policy = m.Child("policy")) {
    MapReader p(m.problems(), *policy, "scheduler.policy");
    p.String("load", s.policy_load);
    p.Bool("learning", s.policy_learning);
    if (!s.policy_load.empty()) {
      s.policy_load = ResolvePath(s.policy_load, "scheduler.policy.load", p.problems(), base_dir);
      if (!fs::exists(s.policy_load)) {
        p.problems().Add(p.Value("load"), "scheduler.policy.load",
                         "no such file: " + s.policy_load);
      }
    }
  }
  StopPolicyOptions& o = s.stop_options;
  std::string reward_time = s.serving.reward_decode_only ? "decode-only" : "step";
  m.Choice("reward_time", reward_time,
           std::initializer_list<std::string_view>{"step", "decode-only"});
  s.serving.reward_decode_only = reward_time == "decode-only";
  m.EnumChoice("state_bins", o.state_bins, kStateBins);
  ReadPolicyConfig(m, o.heuristic);
  ReadPolicyConfig(m, o.bandit);
  ReadPolicyConfig(m, o.qlearning);
  ReadPolicyConfig(m, o.dynamic_batching);
  ReadPolicyConfig(m, o.mpc);
}

void ReadServing(MapReader& root, Scenario& s) {
  const std::optional<YAML::Node> node = root.Child("serving");
  if (!node) return;
  MapReader m(root.problems(), *node, "serving");
  ServingConfig& c = s.serving;
  m.EnumChoice("engine", c.engine, kServingEngines);
  m.Integer("max_prefill_tokens", c.sglang.max_prefill_tokens, 1, 1 << 24);
  m.Integer("chunked_prefill_size", c.sglang.chunked_prefill_size, 0, 1 << 24);
  if (c.engine != ServingEngine::kSglang) {
    for (const char* key : {"max_prefill_tokens", "chunked_prefill_size"}) {
      if (const YAML::Node value = m.Value(key); value.IsDefined() && !value.IsNull()) {
        m.Add(value, key, "is SGLang's limit; it needs serving.engine: sglang");
      }
    }
  }
  m.Integer("max_num_batched_tokens", c.max_num_batched_tokens, 1, 1 << 24);
  m.Integer("max_num_seqs", c.max_num_seqs, 1, 1 << 20);
  m.Integer("block_tokens", c.block_tokens, 1, 4096);
  m.Bool("prefix_caching", c.prefix_caching);
  m.Bool("chunked_prefill", c.chunked_prefill);
  m.Bool("warm_prefix_cache", c.warm_prefix_cache);
  if (c.warm_prefix_cache && !c.prefix_caching) {
    m.Add(m.Value("warm_prefix_cache"), "warm_prefix_cache",
          "needs serving.prefix_caching: true (the warm-up leaves its prefixes in its cache)");
  }
  m.Bool("cascade_attention", c.cascade_attention);
  m.Bool("reserve_full_sequence", c.reserve_full_sequence);
  m.Real("gpu_memory_utilization", c.gpu_memory_utilization, 0, 1, true);
  m.Integer("kv_cache_blocks", c.kv_cache_blocks, 0, int64_t{1} << 40);
}

void ReadRoot(const YAML::Node& doc, YamlProblems& problems, Scenario& s,
              const std::string& base_dir) {
  MapReader root(problems, doc, "");
  root.String("name", s.name);
  if (const std::optional<std::string> why = ScenarioNameProblem(s.name)) {
    problems.Add(root.Value("name"), "name", *why);
  }
  root.Integer("seed", s.seed, 0, std::numeric_limits<int64_t>::max());
  ReadLimits(root, s);
  const size_t problems_before = problems.size();
  ReadWorkload(root, s, base_dir);
  // Only a workload that read cleanly is checked as a whole (a bad value was left at its default).
  if (!s.workload.use_trace && problems.size() == problems_before) {
    const YAML::Node workload = NodeOfFirst(doc, {"workload"});
    CheckSyntheticWorkload(problems, workload.IsMap() ? workload : doc, s);
  }
  ReadScheduler(root, s, base_dir);
  root.EnumChoice("scheduler_time", s.serving.scheduler_time, kSchedulerTimes);
  double fixed_us = static_cast<double>(s.serving.scheduler_fixed_ns) * 1e-3;
  root.Real("scheduler_fixed_us", fixed_us, 0, 1e9);
  s.serving.scheduler_fixed_ns = static_cast<int64_t>(std::llround(fixed_us * 1e3));
  root.Choice("engine", s.engine, std::initializer_list<std::string_view>{"model", "cpu", "cuda"});
  if (const std::optional<YAML::Node> noise = root.Child("step_noise")) {
    MapReader m(root.problems(), *noise, "step_noise");
    m.Bool("enabled", s.step_noise.enabled);
    m.Integer("seed", s.step_noise.seed, 0, std::numeric_limits<int64_t>::max());
    if (s.step_noise.enabled && s.engine != "model") {
      m.Add(m.Value("enabled"), "enabled",
            "step-time noise is drawn by the model engine only; engine is '" + s.engine + "'");
    }
  }
  root.String("model", s.model);
  root.String("profile", s.profile);
  root.String("scheduler_engine_cost", s.engine_cost);
  for (auto [key, dir] : {std::pair<const char*, std::string_view>{"model", "scenarios/models"},
                          {"profile", "results/profiles"},
                          {"scheduler_engine_cost", "results/engine-cost"}}) {
    std::string& value = std::string_view(key) == "model"     ? s.model
                         : std::string_view(key) == "profile" ? s.profile
                                                              : s.engine_cost;
    if (IsShortName(value)) {
      const std::string embedded = std::string(dir) + "/" + value + ".yaml";
      if (!FindEmbeddedFile(embedded)) {
        std::string names;
        for (const EmbeddedFile& f : EmbeddedFiles()) {
          if (f.path.rfind(dir, 0) == 0) {
            std::string_view base = f.path.substr(dir.size() + 1);
            base.remove_suffix(5);
            names += (names.empty() ? "" : " | ") + std::string(base);
          }
        }
        problems.Add(root.Value(key), key,
                     "no built-in " + std::string(key) + " named '" + value +
                         "' (built-in: " + names + "); give a path to use another file");
      }
    } else {
      value = ResolvePath(value, key, problems, base_dir);
      if (!fs::exists(value)) problems.Add(root.Value(key), key, "no such file: " + value);
    }
  }
  ReadServing(root, s);
  if (const auto run = root.Child("run")) {
    MapReader m(problems, *run, "run");
    double max_time_s = static_cast<double>(s.serving.max_sim_ns) * 1e-9;
    m.Real("max_time_s", max_time_s, 0, 1e9);
    s.serving.max_sim_ns = static_cast<int64_t>(std::llround(max_time_s * 1e9));
    m.Integer("max_steps", s.serving.max_steps, 0, std::numeric_limits<int64_t>::max());
  }
}

// Applies "a.b.c=value" to the tree; returns the key path, or records a problem. The paths of
// maps it had to create ("a", "a.b") are appended to `created`, with the key path.
std::optional<std::string> ApplyOverride(
    YAML::Node& doc, const std::string& text, std::vector<InputProblem>& problems,
    std::vector<std::pair<std::string, std::string>>& created) {
  const size_t eq = text.find('=');
  // Checked first, so that no message echoes the bad bytes (a file's text gets the same check in
  // ParseYaml).
  if (const std::optional<size_t> bad = FirstInvalidUtf8(text)) {
    char byte[8];
    std::snprintf(byte, sizeof(byte), "0x%02X", static_cast<unsigned char>(text[*bad]));
    const bool in_value = eq != std::string::npos && *bad > eq;
    problems.push_back({"--set", 0, in_value ? text.substr(0, eq) : "",
                        std::string("not valid UTF-8: byte ") + byte + " at column " +
                            std::to_string(*bad + 1) + " of the --set argument"});
    return std::nullopt;
  }
  if (eq == std::string::npos || eq == 0) {
    problems.push_back({"--set", 0, text, "expected key=value"});
    return std::nullopt;
  }
  const std::string key = text.substr(0, eq);
  const std::string value = text.substr(eq + 1);
  YAML::Node parsed;
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::Exception&) {
    parsed = YAML::Node(value);  // not YAML: take it as a plain string
  }
  if (!parsed.IsDefined() || parsed.IsNull()) parsed = YAML::Node(value);
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (!doc.IsMap()) doc = YAML::Node(YAML::NodeType::Map);
  // yaml-cpp nodes are handles: walking with a stack of handles keeps each level addressable.
  std::vector<YAML::Node> chain{doc};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = chain.back()[parts[i]];
    if (!next.IsMap()) {
      if (next.IsDefined() && !next.IsNull()) {
        problems.push_back({"--set", 0, key, "'" + parts[i] + "' is not a map in the scenario"});
        return std::nullopt;
      }
      chain.back()[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next = chain.back()[parts[i]];
      std::string path = parts[0];
      for (size_t k = 1; k <= i; ++k) path += "." + parts[k];
      created.emplace_back(std::move(path), key);
    }
    chain.push_back(next);
  }
  chain.back()[parts.back()] = parsed;
  return key;
}

Scenario Load(std::string_view text, const std::string& display_name, const std::string& base_dir,
              std::span<const std::string> overrides) {
  YAML::Node doc = ParseYaml(text, display_name);
  if (doc.IsNull() || !doc.IsDefined()) doc = YAML::Node(YAML::NodeType::Map);
  if (!doc.IsMap()) {
    throw InputError(display_name, static_cast<uint32_t>(doc.Mark().line + 1), "",
                     "a scenario is a YAML map of keys, got " + Describe(doc));
  }
  std::vector<InputProblem> override_problems;
  std::vector<std::string> override_keys;
  std::vector<std::pair<std::string, std::string>> created;
  for (const std::string& o : overrides) {
    if (auto key = ApplyOverride(doc, o, override_problems, created)) {
      override_keys.push_back(*key);
    }
  }
  if (!override_problems.empty()) throw InputError(std::move(override_problems));

  YamlProblems problems(display_name, override_keys);
  for (auto& [path, key] : created) problems.NoteCreatedByOverride(std::move(path), key);
  Scenario scenario;
  scenario.source = display_name;
  ReadRoot(doc, problems, scenario, base_dir);
  scenario.stop_options.seed = scenario.seed;
  if (!problems.empty()) throw InputError(problems.Take());
  return scenario;
}

}  // namespace

Scenario LoadScenarioText(std::string_view text, const std::string& display_name,
                          const std::string& base_dir, std::span<const std::string> overrides) {
  return Load(text, display_name, base_dir, overrides);
}

Scenario LoadScenarioFile(const std::string& path, std::span<const std::string> overrides) {
  const std::string text = ReadTextFile(path, "scenario file");
  const std::string base_dir = fs::path(path).parent_path().string();
  return Load(text, path, base_dir.empty() ? "." : base_dir, overrides);
}

ResolvedText ReadNamedFile(const std::string& name_or_path, std::string_view embedded_dir,
                           std::string_view key) {
  if (IsShortName(name_or_path)) {
    const std::string embedded = std::string(embedded_dir) + "/" + name_or_path + ".yaml";
    if (auto text = FindEmbeddedFile(embedded)) {
      return {std::string(*text), "<built-in>/" + embedded};
    }
    throw InputError("<scenario>", 0, std::string(key),
                     "no built-in file named '" + name_or_path + "'");
  }
  return {ReadTextFile(name_or_path, "file", key), name_or_path};
}

ResolvedText ReadProfileFile(const std::string& name_or_path) {
  if (IsShortName(name_or_path)) {
    const std::string on_disk = "results/profiles/" + name_or_path + ".yaml";
    std::error_code error;
    if (fs::is_regular_file(on_disk, error)) {
      return {ReadTextFile(on_disk, "file", "profile"), on_disk};
    }
  }
  return ReadNamedFile(name_or_path, "results/profiles", "profile");
}

namespace {

nlohmann::ordered_json LengthToJson(const LengthSpec& l) {
  switch (l.kind) {
    case LengthKind::kFixed:
      return {{"kind", "fixed"}, {"value", l.value}};
    case LengthKind::kUniform:
      return {{"kind", "uniform"}, {"min", l.min}, {"max", l.max}};
    case LengthKind::kLognormal:
      return {{"kind", "lognormal"},
              {"mean", l.mean},
              {"sigma", l.sigma},
              {"min", l.min},
              {"max", l.max}};
  }
  return {};
}

}  // namespace

nlohmann::ordered_json ScenarioToJson(const Scenario& s) {
  using J = nlohmann::ordered_json;
  const WorkloadSpec& w = s.workload;
  J arrival = {{"kind", NameOf(kArrivalKinds, w.arrival.kind)}, {"rate", w.arrival.rate_per_s}};
  if (!w.arrival.phases.empty()) {
    J phases = J::array();
    for (const RatePhase& p : w.arrival.phases) {
      phases.push_back({{"duration_s", p.duration_s}, {"rate", p.rate_per_s}});
    }
    arrival["phases"] = phases;
  }
  const SharingSpec& sh = w.sharing;
  J sharing = {{"kind", NameOf(kSharingKinds, sh.kind)},
               {"groups", sh.groups},
               {"prefix_tokens", sh.prefix_tokens},
               {"group_sizes", NameOf(kGroupSizes, sh.group_sizes)},
               {"zipf_exponent", sh.zipf_exponent},
               {"levels", sh.levels},
               {"branching", sh.branching},
               {"level_tokens", sh.level_tokens},
               {"shared_fraction", sh.shared_fraction}};
  J workload = {{"requests", w.requests},
                {"arrival", arrival},
                {"sharing", sharing},
                {"prompt_tokens", LengthToJson(w.prompt_tokens)},
                {"output_tokens", LengthToJson(w.output_tokens)}};
  if (w.use_trace) {
    workload["trace"] = {{"path", w.trace.path},
                         {"time_scale", w.trace.time_scale},
                         {"limit", w.trace.limit},
                         {"block_tokens", w.trace.block_tokens},
                         {"closed_loop", w.trace.closed_loop}};
  }
  const StopPolicyOptions& o = s.stop_options;
  J scheduler = {{"selector", s.selector}, {"stop", s.stop}};
  scheduler.update(PolicyConfigJson(s.selector_options));
  scheduler.update(J{{"policy", {{"load", s.policy_load}, {"learning", s.policy_learning}}},
                     {HeuristicConfig::kSection, PolicyConfigJson(o.heuristic)},
                     {"reward_time", s.serving.reward_decode_only ? "decode-only" : "step"},
                     {"state_bins", NameOf(kStateBins, o.state_bins)},
                     {BanditConfig::kSection, PolicyConfigJson(o.bandit)},
                     {QLearningConfig::kSection, PolicyConfigJson(o.qlearning)},
                     {DynamicBatchingConfig::kSection, PolicyConfigJson(o.dynamic_batching)},
                     {MpcConfig::kSection, PolicyConfigJson(o.mpc)}});
  const ServingConfig& c = s.serving;
  J serving = {{"max_num_batched_tokens", c.max_num_batched_tokens},
               {"max_num_seqs", c.max_num_seqs},
               {"block_tokens", c.block_tokens},
               {"prefix_caching", c.prefix_caching},
               {"chunked_prefill", c.chunked_prefill},
               {"cascade_attention", c.cascade_attention},
               {"reserve_full_sequence", c.reserve_full_sequence},
               {"gpu_memory_utilization", c.gpu_memory_utilization},
               {"kv_cache_blocks", c.kv_cache_blocks}};
  // Echoed only when on, so that the summaries of runs without it stay bit for bit.
  if (c.warm_prefix_cache) serving["warm_prefix_cache"] = true;
  // Echoed only under sglang, so that vLLM runs keep their summaries bit for bit.
  if (c.engine == ServingEngine::kSglang) {
    serving["engine"] = NameOf(kServingEngines, c.engine);
    serving["max_prefill_tokens"] = c.sglang.max_prefill_tokens;
    serving["chunked_prefill_size"] = c.sglang.chunked_prefill_size;
  }
  J out{{"name", s.name},
        {"source", s.source},
        {"seed", s.seed},
        {"workload", workload},
        {"scheduler", scheduler},
        {"scheduler_time", NameOf(kSchedulerTimes, c.scheduler_time)},
        {"scheduler_fixed_us", static_cast<double>(c.scheduler_fixed_ns) * 1e-3},
        {"engine", s.engine},
        {"step_noise", {{"enabled", s.step_noise.enabled}, {"seed", s.step_noise.seed}}},
        {"model", s.model},
        {"profile", s.profile},
        {"serving", serving},
        {"run",
         {{"max_time_s", static_cast<double>(c.max_sim_ns) * 1e-9}, {"max_steps", c.max_steps}}},
        {"limits",
         {{"max_requests", w.limits.max_requests},
          {"max_prompt_tokens", w.limits.max_prompt_tokens},
          {"max_total_tokens", w.limits.max_total_tokens},
          {"allow_unservable", w.limits.allow_unservable}}}};
  // Echoed only where it is used, so the summaries of the other modes keep their shape.
  if (c.scheduler_time == SchedulerTimeMode::kEngine) out["scheduler_engine_cost"] = s.engine_cost;
  return out;
}

}  // namespace feather
