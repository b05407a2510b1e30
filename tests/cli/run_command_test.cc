// run_command_test.cc: `feather run` and `feather pretrain` end to end through the binary:
// the output contract (summary.json keys, results.h5), byte-identical reruns, bad input (exit 2,
// file:line:key, no output directory), a pretrained policy loaded frozen, requests that can never
// be served and runs that finish nothing (exit 3, one stderr line, limits.allow_unservable), and
// the text summary (rates, time units, the overload line).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_command.h"
#include "tests/cli/cli_test_support.h"

namespace feather {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using test::RunFeather;
using test::RunResult;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class RunCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("feather_run_" + std::string(::testing::UnitTest::GetInstance()
                                             ->current_test_info()
                                             ->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A small, deterministic version of the default scenario.
  static std::vector<std::string> Small(std::vector<std::string> args) {
    for (const char* set : {"workload.requests=300", "scheduler_time=zero"}) {
      args.push_back("--set");
      args.push_back(set);
    }
    return args;
  }
  // Small(args) with `sets` applied after its own (the last --set of a key wins).
  static std::vector<std::string> SmallWith(std::vector<std::string> args,
                                            const std::vector<std::string>& sets) {
    args = Small(std::move(args));
    for (const std::string& set : sets) {
      args.push_back("--set");
      args.push_back(set);
    }
    return args;
  }

  fs::path dir_;
};

TEST_F(RunCommandTest, WritesTheContractFields) {
  const RunResult run = RunFeather(Small({"run", "--out", (dir_ / "a").string()}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("output tok/s"));
  const auto summary = nlohmann::json::parse(ReadFile(dir_ / "a" / "summary.json"));
  for (const char* key :
       {"requests_finished", "requests_unservable", "output_tokens", "duration_s",
        "throughput_tok_s", "mean_tbt_ms", "p99_tbt_ms", "mean_ttft_ms", "mean_batch_size",
        "scheduler_cpu_s", "engine_busy_s", "preemptions", "evictions", "scenario"}) {
    EXPECT_TRUE(summary.contains(key)) << key;
  }
  EXPECT_EQ(summary["requests_finished"], 300);
  EXPECT_EQ(summary["requests_unservable"], 0);
  EXPECT_EQ(summary["scenario"]["limits"]["allow_unservable"], false);
  EXPECT_EQ(summary["scenario"]["workload"]["requests"], 300);
  EXPECT_EQ(summary["scenario"]["scheduler"]["selector"], "cht");
  EXPECT_GT(summary["scenario"]["resolved"]["kv_cache_blocks"].get<uint64_t>(), 0u);
  EXPECT_TRUE(fs::exists(dir_ / "a" / "results.h5"));
}

// `profile: NAME` reads ./results/profiles/NAME.yaml when there is one (a profile recalibrated
// in place), else the built-in copy; summary.json says which (issue 20). A profile measured on
// another machine is used with one warning line.
TEST_F(RunCommandTest, AProfileOnDiskWinsOverTheBuiltInOneAndTheSummarySaysWhich) {
  const std::vector<std::string> small = {"run", "--set", "workload.requests=5", "--set",
                                          "profile=cpu", "--set", "model=cpu-small", "--out"};
  auto run_in = [&](const std::string& out) {
    std::vector<std::string> args = small;
    args.push_back(out);
    return RunFeather(args, dir_.string());
  };
  const RunResult built_in = run_in("a");
  ASSERT_EQ(built_in.exit_code, 0) << built_in.err;
  auto resolved = [&](const char* run) {
    return nlohmann::json::parse(ReadFile(dir_ / run / "summary.json"))["scenario"]["resolved"];
  };
  EXPECT_EQ(resolved("a")["profile_file"], "<built-in>/results/profiles/cpu.yaml");

  std::string yaml = ReadFile(std::string(FEATHER_SOURCE_DIR) + "/results/profiles/cpu.yaml");
  yaml.replace(yaml.find("name: \"cpu\""), 11, "name: \"cpu-here\"");
  const size_t model = yaml.find("  cpu_model: ");
  yaml.replace(model, yaml.find('\n', model) - model, "  cpu_model: \"Imaginary CPU 9000\"");
  fs::create_directories(dir_ / "results" / "profiles");
  std::ofstream(dir_ / "results" / "profiles" / "cpu.yaml") << yaml;
  const RunResult on_disk = run_in("b");
  ASSERT_EQ(on_disk.exit_code, 0) << on_disk.err;
  EXPECT_EQ(resolved("b")["profile_file"], "results/profiles/cpu.yaml");
  EXPECT_EQ(resolved("b")["profile"], "cpu-here");
  EXPECT_THAT(on_disk.err, HasSubstr("warning: profile results/profiles/cpu.yaml was measured on "
                                     "Imaginary CPU 9000"));
  EXPECT_THAT(on_disk.err, HasSubstr("feather calibrate --target cpu"));
  EXPECT_EQ(std::count(on_disk.err.begin(), on_disk.err.end(), '\n'), 1) << on_disk.err;
}

// A measured profile used with other KV pages than it was calibrated with: one warning line
// naming both sizes and the calibration that fits; none with its own pages.
TEST_F(RunCommandTest, AProfileOfOtherPagesWarnsOnce) {
  const std::vector<std::string> base = {"run",         "--set", "workload.requests=5", "--set",
                                         "profile=cpu", "--set", "model=cpu-small"};
  std::vector<std::string> other = base;
  other.insert(other.end(), {"--set", "serving.block_tokens=128", "--out", "pages"});
  const RunResult warned = RunFeather(other, dir_.string());
  ASSERT_EQ(warned.exit_code, 0) << warned.err;
  EXPECT_THAT(warned.err, HasSubstr("calibrated with 16-token KV pages; this run uses 128 "
                                    "(serving.block_tokens)"));
  EXPECT_THAT(warned.err, HasSubstr("feather calibrate --block-tokens 128"));
  // (The built-in profile may also be foreign to this machine: that is a line of its own.)
  EXPECT_EQ(warned.err.find("KV pages"), warned.err.rfind("KV pages")) << warned.err;
  std::vector<std::string> same = base;
  same.insert(same.end(), {"--out", "same"});
  const RunResult quiet = RunFeather(same, dir_.string());
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_THAT(quiet.err, Not(HasSubstr("KV pages")));
}

TEST_F(RunCommandTest, SameSeedGivesByteIdenticalSummary) {
  ASSERT_EQ(RunFeather(Small({"run", "--out", (dir_ / "a").string()})).exit_code, 0);
  ASSERT_EQ(RunFeather(Small({"run", "--out", (dir_ / "b").string()})).exit_code, 0);
  const std::string a = ReadFile(dir_ / "a" / "summary.json");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, ReadFile(dir_ / "b" / "summary.json"));
  // A different seed is a different run.
  ASSERT_EQ(RunFeather(Small({"run", "--out", (dir_ / "c").string(), "--set", "seed=2"}))
                .exit_code,
            0);
  EXPECT_NE(a, ReadFile(dir_ / "c" / "summary.json"));
}

TEST_F(RunCommandTest, BadScenarioExitsTwoWithFileLineKeyAndWritesNothing) {
  const fs::path scenario = dir_ / "bad.yaml";
  std::ofstream(scenario) << "seed: 1\nworkload:\n  requests: 10\n  arival: {rate: 5}\n";
  const fs::path out = dir_ / "out";
  const RunResult run = RunFeather({"run", scenario.string(), "--out", out.string()});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr(scenario.string() + ":4: workload.arival: unknown key"));
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(RunCommandTest, BadOverrideAndUnbuiltEngineExitTwo) {
  const fs::path out = dir_ / "out";
  const RunResult bad = RunFeather({"run", "--out", out.string(), "--set", "seed=-3"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--set: seed"));
  const RunResult engine = RunFeather({"run", "--out", out.string(), "--set", "engine=cuda"});
  EXPECT_EQ(engine.exit_code, 2);
  EXPECT_THAT(engine.err, HasSubstr("engine 'cuda'"));
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(RunCommandTest, PretrainedPolicyLoadsFrozen) {
  const std::string scenario = std::string(FEATHER_SOURCE_DIR) + "/scenarios/default.yaml";
  const fs::path policy = dir_ / "bandit.json";
  const RunResult train = RunFeather(Small(
      {"pretrain", scenario, "--steps", "400", "--out", policy.string(), "--set",
       "scheduler.stop=bandit"}));
  ASSERT_EQ(train.exit_code, 0) << train.err;
  EXPECT_THAT(train.out, HasSubstr("saved bandit policy"));
  const std::string saved = ReadFile(policy);
  ASSERT_FALSE(saved.empty());
  const RunResult frozen = RunFeather(Small(
      {"run", scenario, "--out", (dir_ / "frozen").string(), "--set",
       "scheduler.policy.load=" + policy.string(), "--set", "scheduler.policy.learning=false",
       "--set", "scheduler.stop=bandit"}));
  ASSERT_EQ(frozen.exit_code, 0) << frozen.err;
  EXPECT_EQ(saved, ReadFile(policy));  // a frozen run never writes the policy
  // Loading a policy of another kind is refused.
  const RunResult wrong = RunFeather(Small(
      {"run", scenario, "--out", (dir_ / "wrong").string(), "--set", "scheduler.stop=qlearning",
       "--set", "scheduler.policy.load=" + policy.string()}));
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_FALSE(fs::exists(dir_ / "wrong"));
}

// The figures of pretrain's per-epoch lines that match `epoch_line` (group 1 the epoch, the rest
// numbers), in order; empty, with a failure recorded, when the epochs are not 0, 1, 2, ...
std::vector<std::vector<double>> EpochFigures(const std::string& out,
                                              const std::regex& epoch_line) {
  std::vector<std::vector<double>> epochs;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, epoch_line)) continue;
    if (std::stoul(m[1]) != epochs.size()) {
      ADD_FAILURE() << "epoch " << m[1] << " where " << epochs.size() << " was due: " << line;
      return {};
    }
    std::vector<double> figures;
    for (size_t g = 2; g < m.size(); ++g) figures.push_back(std::stod(m[g]));
    epochs.push_back(std::move(figures));
  }
  return epochs;
}

// --keep best saves the epoch whose frozen held-out run was fastest, and that table run frozen on
// the held-out workload gives the throughput the log printed for it; --keep last saves the final
// table.
TEST_F(RunCommandTest, PretrainKeepsTheBestEpochOnTheHeldOutWorkload) {
  const std::string scenario = std::string(FEATHER_SOURCE_DIR) + "/scenarios/default.yaml";
  const std::vector<std::string> q = {"scheduler.stop=qlearning", "workload.requests=150"};
  const fs::path best = dir_ / "best.json";
  const RunResult train = RunFeather(
      SmallWith({"pretrain", scenario, "--steps", "3000", "--out", best.string()}, q));
  ASSERT_EQ(train.exit_code, 0) << train.err;
  // "epoch E: ...; frozen on the held-out workload X tok/s, ..." per epoch.
  const std::regex epoch_line(R"(epoch (\d+): .*frozen on the held-out workload ([0-9.]+) tok/s)");
  std::vector<double> frozen;
  for (const std::vector<double>& epoch : EpochFigures(train.out, epoch_line)) {
    frozen.push_back(epoch[0]);
  }
  ASSERT_GE(frozen.size(), 2u) << train.out;
  const double top = *std::max_element(frozen.begin(), frozen.end());
  std::smatch saved;
  ASSERT_TRUE(std::regex_search(train.out, saved, std::regex(R"(\(epoch (\d+)'s table)")))
      << train.out;
  // The log's one decimal can tie epochs that differ further down: any printed maximum will do.
  const size_t chosen = std::stoul(saved[1]);
  ASSERT_LT(chosen, frozen.size());
  EXPECT_EQ(frozen[chosen], top) << train.out;
  EXPECT_GT(top, *std::min_element(frozen.begin(), frozen.end()))
      << "every epoch's table ran the same: the test would not see a wrong choice";
  // The saved table, frozen, on the held-out workload (seed 1 + 1,000,003: default.yaml's seed).
  const RunResult check = RunFeather(SmallWith(
      {"run", scenario, "--json", "--out", (dir_ / "check").string()},
      {"scheduler.stop=qlearning", "workload.requests=150", "seed=1000004",
       "scheduler.policy.load=" + best.string(), "scheduler.policy.learning=false"}));
  ASSERT_EQ(check.exit_code, 0) << check.err;
  const double held_out =
      nlohmann::json::parse(ReadFile(dir_ / "check" / "summary.json"))["throughput_tok_s"]
          .get<double>();
  EXPECT_NEAR(held_out, top, 0.051);  // the log prints one decimal

  const fs::path last = dir_ / "last.json";
  const RunResult train_last = RunFeather(SmallWith(
      {"pretrain", scenario, "--steps", "3000", "--keep", "last", "--out", last.string()}, q));
  ASSERT_EQ(train_last.exit_code, 0) << train_last.err;
  EXPECT_THAT(train_last.out, HasSubstr("(the last table)"));
  EXPECT_THAT(train_last.out, Not(HasSubstr("held-out")));
  const RunResult bad = RunFeather(SmallWith(
      {"pretrain", scenario, "--steps", "10", "--keep", "first", "--out", last.string()}, q));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--keep"));
}

// --held-out N judges each epoch by the mean of N held-out workloads: the log prints each and the
// mean, the kept epoch has the highest mean, and N outside [1, 64] is refused.
TEST_F(RunCommandTest, PretrainJudgesEachEpochOnTheMeanOfItsHeldOutWorkloads) {
  const std::string scenario = std::string(FEATHER_SOURCE_DIR) + "/scenarios/default.yaml";
  const std::vector<std::string> q = {"scheduler.stop=qlearning", "workload.requests=150"};
  const fs::path best = dir_ / "best.json";
  const RunResult train = RunFeather(SmallWith(
      {"pretrain", scenario, "--steps", "3000", "--held-out", "2", "--out", best.string()}, q));
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const std::regex epoch_line(
      R"(epoch (\d+): .*frozen on 2 held-out workloads ([0-9.]+) tok/s \(([0-9.]+), ([0-9.]+)\))");
  std::vector<double> means;
  for (const std::vector<double>& epoch : EpochFigures(train.out, epoch_line)) {
    means.push_back(epoch[0]);
    EXPECT_NEAR(epoch[0], (epoch[1] + epoch[2]) / 2, 0.051) << "epoch " << means.size() - 1;
  }
  ASSERT_GE(means.size(), 2u) << train.out;
  std::smatch saved;
  ASSERT_TRUE(std::regex_search(train.out, saved,
                                std::regex(R"(\(epoch (\d+)'s table: frozen ([0-9.]+) tok/s on )"
                                           R"(the held-out workloads' mean)")))
      << train.out;
  const size_t chosen = std::stoul(saved[1]);
  ASSERT_LT(chosen, means.size());
  EXPECT_EQ(means[chosen], *std::max_element(means.begin(), means.end())) << train.out;

  for (const char* bad_count : {"0", "65"}) {
    const RunResult bad = RunFeather(SmallWith({"pretrain", scenario, "--steps", "10", "--held-out",
                                                bad_count, "--out", (dir_ / "bad.json").string()},
                                               q));
    EXPECT_EQ(bad.exit_code, 2) << bad_count;
    EXPECT_THAT(bad.err, HasSubstr("--held-out")) << bad_count;
    EXPECT_FALSE(fs::exists(dir_ / "bad.json"));
  }
}

// ---- requests that can never be served (exit 3) ---------------------------------------------

nlohmann::json SummaryOf(const fs::path& dir) {
  return nlohmann::json::parse(ReadFile(dir / "summary.json"));
}

// The stderr lines that start with "feather: ".
std::vector<std::string> FeatherLines(const std::string& err) {
  std::vector<std::string> lines;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("feather: ", 0) == 0) lines.push_back(line);
  }
  return lines;
}

TEST_F(RunCommandTest, PromptsLargerThanTheKvCacheExitThreeAndAreNamed) {
  // Five 9,000-token prompts (5,000 shared + 4,000) and a 4-block cache: nothing can run.
  const fs::path out = dir_ / "kv";
  const std::vector<std::string> sets = {"workload.requests=5", "workload.prompt_tokens=4000",
                                         "serving.kv_cache_blocks=4"};
  const RunResult run = RunFeather(SmallWith({"run", "--out", out.string()}, sets));
  EXPECT_EQ(run.exit_code, 3) << run.err;
  const std::vector<std::string> lines = FeatherLines(run.err);
  ASSERT_EQ(lines.size(), 2u) << run.err;
  EXPECT_THAT(lines[0], HasSubstr("5 of 5 requests can never be served and were rejected: 5 need "
                                  "more KV blocks for prompt + output than the whole cache holds "
                                  "(up to 575 blocks; the cache has 4); requests 0, 1, 2, 3, 4"));
  EXPECT_THAT(lines[0], HasSubstr("limits.allow_unservable: true"));
  EXPECT_THAT(lines[1], HasSubstr("no request finished: every request was rejected"));
  EXPECT_THAT(run.out, HasSubstr("0 / 5 (5 unservable, rejected)"));
  // The outputs are written all the same.
  const auto summary = SummaryOf(out);
  EXPECT_EQ(summary["requests_unservable"], 5);
  EXPECT_EQ(summary["requests_finished"], 0);
  EXPECT_TRUE(fs::exists(out / "results.h5"));
  // Even when unservable requests are expected, a run that finishes nothing is an error.
  const RunResult allowed = RunFeather(
      SmallWith({"run", "--out", out.string(), "--set", "limits.allow_unservable=true"}, sets));
  EXPECT_EQ(allowed.exit_code, 3) << allowed.err;
  EXPECT_THAT(allowed.err, HasSubstr("no request finished"));
}

TEST_F(RunCommandTest, PromptsOverTheBudgetWithoutChunkedPrefillExitThreeUnlessAllowed) {
  // Unshared prompts of 100-2,000 tokens, a 1,024-token budget and no chunked prefill: the
  // longer half can never be scheduled, the rest is served.
  const std::vector<std::string> sets = {
      "workload.requests=40",
      "workload.sharing.kind=none",
      "workload.prompt_tokens={kind: uniform, min: 100, max: 2000}",
      "workload.output_tokens=20",
      "serving.chunked_prefill=false",
      "serving.max_num_batched_tokens=1024"};
  const RunResult run = RunFeather(SmallWith({"run", "--out", (dir_ / "budget").string()}, sets));
  EXPECT_EQ(run.exit_code, 3) << run.err;
  const auto summary = SummaryOf(dir_ / "budget");
  const uint64_t unservable = summary["requests_unservable"].get<uint64_t>();
  EXPECT_GT(unservable, 0u);
  EXPECT_LT(unservable, 40u);
  EXPECT_EQ(summary["requests_finished"].get<uint64_t>() + unservable, 40u);
  const std::vector<std::string> lines = FeatherLines(run.err);
  ASSERT_EQ(lines.size(), 1u) << run.err;
  EXPECT_THAT(lines[0], HasSubstr(std::to_string(unservable) +
                                  " of 40 requests can never be "
                                  "served and were rejected: " +
                                  std::to_string(unservable) +
                                  " have a prompt longer than the token budget with chunked "
                                  "prefill off"));
  EXPECT_THAT(lines[0], HasSubstr("serving.max_num_batched_tokens 1024); requests "));

  // Expected by the scenario: exit 0, the line still printed, the same results.
  const RunResult allowed = RunFeather(SmallWith(
      {"run", "--out", (dir_ / "allowed").string(), "--set", "limits.allow_unservable=true"},
      sets));
  EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
  EXPECT_THAT(allowed.err, HasSubstr("can never be served"));
  EXPECT_THAT(allowed.err, HasSubstr("(expected: limits.allow_unservable is true)"));
  const auto allowed_summary = SummaryOf(dir_ / "allowed");
  EXPECT_EQ(allowed_summary["requests_unservable"], unservable);
  EXPECT_EQ(allowed_summary["scenario"]["limits"]["allow_unservable"], true);

  // The same in a scenario file, and --json keeps stdout to the summary's bytes.
  const fs::path file = dir_ / "allowed.yaml";
  std::ofstream(file) << "limits: {allow_unservable: true}\n";
  const RunResult json = RunFeather(
      SmallWith({"run", file.string(), "--json", "--out", (dir_ / "file").string()}, sets));
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out)["requests_unservable"], unservable);
}

TEST_F(RunCommandTest, AllowUnservableMustBeABool) {
  const RunResult run =
      RunFeather({"run", "--out", (dir_ / "x").string(), "--set", "limits.allow_unservable=3"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("limits.allow_unservable"));
  EXPECT_FALSE(fs::exists(dir_ / "x"));
}

TEST_F(RunCommandTest, ARunThatFinishesNothingExitsThree) {
  const RunResult run =
      RunFeather(SmallWith({"run", "--out", (dir_ / "short").string()}, {"run.max_steps=3"}));
  EXPECT_EQ(run.exit_code, 3) << run.err;
  EXPECT_THAT(run.err, HasSubstr("no request finished: the run stopped at run.max_steps 3"));
  EXPECT_EQ(SummaryOf(dir_ / "short")["requests_finished"], 0);
}

// The text summary's time format, on literal cases (the issue's TTFT printed as 2889527.50 ms).
TEST(FormatTimeTest, MillisecondsBelowTenSecondsSecondsFromThere) {
  EXPECT_EQ(FormatTime(0), "0.00 ms");
  EXPECT_EQ(FormatTime(310.5), "310.50 ms");
  EXPECT_EQ(FormatTime(9'999.994), "9999.99 ms");
  EXPECT_EQ(FormatTime(10'000), "10.00 s");
  EXPECT_EQ(FormatTime(2'889'527.5), "2889.53 s");
}

// A time as the text summary prints it (the format is pinned by FormatTimeTest).
std::string ExpectedTime(double ms) { return FormatTime(ms); }

// The text summary's time lines, from summary.json's values.
void ExpectTimeLines(const RunResult& run, const nlohmann::json& summary) {
  const auto ms = [&](const char* key) { return summary[key].get<double>(); };
  EXPECT_THAT(run.out, HasSubstr("mean / p99 TTFT          " + ExpectedTime(ms("mean_ttft_ms")) +
                                 " / " + ExpectedTime(ms("p99_ttft_ms")) + "\n"));
  EXPECT_THAT(run.out, HasSubstr("mean / p99 TBT           " + ExpectedTime(ms("mean_tbt_ms")) +
                                 " / " + ExpectedTime(ms("p99_tbt_ms")) + "\n"));
  EXPECT_THAT(run.out, HasSubstr("mean latency             " + ExpectedTime(ms("mean_latency_ms")) +
                                 " (arrival to last token)"));
  EXPECT_THAT(run.out, HasSubstr("simulated duration       " +
                                 ExpectedTime(1e3 * summary["duration_s"].get<double>())));
}

// The text summary: output and input rates, the cache hit rate, times in ms below 10 s and in
// s above, and the overload line only for an overloaded run.
TEST_F(RunCommandTest, TextSummaryNamesRatesTimeUnitsAndOverload) {
  // 1,000 req/s is far beyond what the profile serves (~30 req/s): the queue grows (1,000
  // requests, so that the last ones wait well over 10 s whatever the stop policy).
  const RunResult over =
      RunFeather(SmallWith({"run", "--out", (dir_ / "over").string()},
                           {"workload.arrival.rate=1000", "workload.requests=1000"}));
  ASSERT_EQ(over.exit_code, 0) << over.err;
  const auto summary = SummaryOf(dir_ / "over");
  EXPECT_THAT(over.out, HasSubstr("output tok/s"));
  EXPECT_THAT(over.out, HasSubstr("input (prefilled) tok/s"));
  EXPECT_THAT(over.out, HasSubstr("prompt cache hit rate"));
  ExpectTimeLines(over, summary);
  EXPECT_GT(summary["p99_ttft_ms"].get<double>(), 10'000.0);  // printed in s
  EXPECT_LT(summary["mean_tbt_ms"].get<double>(), 10'000.0);  // printed in ms
  EXPECT_THAT(over.out, ::testing::ContainsRegex(
                            R"(overloaded +yes: arrivals outpaced service; [0-9]+ of 1000 )"
                            R"(requests still waited for admission when the last one arrived)"));

  // 2 requests/s of short prompts: served as they come.
  const RunResult light =
      RunFeather(SmallWith({"run", "--out", (dir_ / "light").string()},
                           {"workload.requests=20", "workload.arrival.rate=2"}));
  ASSERT_EQ(light.exit_code, 0) << light.err;
  EXPECT_THAT(light.out, Not(HasSubstr("overloaded")));
  ExpectTimeLines(light, SummaryOf(dir_ / "light"));
  EXPECT_THAT(light.out, ::testing::ContainsRegex(R"(mean / p99 TTFT +[0-9]+\.[0-9]{2} ms / )"));
}

}  // namespace
}  // namespace feather
