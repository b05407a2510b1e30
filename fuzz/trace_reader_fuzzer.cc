// trace_reader_fuzzer.cc: libFuzzer target for the Mooncake JSONL trace reader
// (sim/workload/trace_reader.h) and the trace replay that turns its records into a workload.
//
// Input: byte 0 chooses block_tokens (1..64), byte 1 the record limit (0..15, 0 = all); the rest
// is the trace text. Contract checked: reading either succeeds or throws InputError naming the
// file (never another exception, a crash or UB); a trace that reads back satisfies the header's
// promises (timestamps >= 0 and non-decreasing, lengths >= 1, ceil(input/block) block ids each,
// token total), and a small one replays into a workload (through a memfd, no file on disk) whose
// prompts have exactly the traced lengths.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "base/check.h"
#include "base/input_error.h"
#include "sim/workload/trace_reader.h"
#include "sim/workload/workload.h"

namespace {

void CheckTrace(const feather::MooncakeTrace& trace, const feather::TraceReadOptions& options) {
  FEATHER_CHECK(!trace.records.empty(), "a trace without records was accepted");
  uint64_t total = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    const feather::TraceRecord& r = trace.records[i];
    FEATHER_CHECK(r.timestamp_ms >= 0, "negative timestamp");
    if (i > 0) FEATHER_CHECK(r.timestamp_ms >= trace.records[i - 1].timestamp_ms, "unordered");
    FEATHER_CHECK(r.input_tokens >= 1 && r.output_tokens >= 1, "zero length");
    const uint64_t blocks =
        (uint64_t{r.input_tokens} + options.block_tokens - 1) / options.block_tokens;
    FEATHER_CHECK(r.block_count == blocks, "block count");
    FEATHER_CHECK(r.first_block + r.block_count <= trace.block_ids.size(), "block range");
    total += r.input_tokens;
  }
  FEATHER_CHECK(total == trace.total_input_tokens, "token total");
  if (options.limit > 0) FEATHER_CHECK(trace.size() <= options.limit, "limit");
}

// Replays the same bytes through GenerateWorkload (which reads a path) via an anonymous file.
void CheckReplay(std::string_view text, const feather::MooncakeTrace& trace,
                 const feather::TraceReadOptions& options) {
  if (trace.total_input_tokens > 100'000) return;
  const int fd = memfd_create("trace", 0);
  if (fd < 0) return;
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = write(fd, text.data() + written, text.size() - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  if (written == text.size()) {
    feather::WorkloadSpec spec;
    spec.use_trace = true;
    spec.trace.path = "/proc/self/fd/" + std::to_string(fd);
    spec.trace.limit = options.limit;
    spec.trace.block_tokens = options.block_tokens;
    const feather::Workload w = feather::GenerateWorkload(spec, 1);
    FEATHER_CHECK(w.size() == trace.size(), "replayed request count");
    for (size_t i = 0; i < w.size(); ++i) {
      FEATHER_CHECK(w.prompts.Prompt(i).size() == trace.records[i].input_tokens, "prompt length");
      FEATHER_CHECK(w.output_tokens[i] == trace.records[i].output_tokens, "output length");
      if (i > 0) FEATHER_CHECK(w.arrival_ns[i] >= w.arrival_ns[i - 1], "replayed arrivals");
    }
  }
  close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  feather::TraceReadOptions options;
  options.block_tokens = 1 + data[0] % 64;
  options.limit = data[1] % 16;
  options.max_problems = 1 + data[1] / 16;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  std::istringstream in{std::string(text)};
  try {
    const feather::MooncakeTrace trace = feather::ParseMooncakeTrace(in, "fuzz.jsonl", options);
    CheckTrace(trace, options);
    CheckReplay(text, trace, options);
  } catch (const feather::InputError& error) {
    FEATHER_CHECK(!error.problems().empty(), "an InputError without problems");
    for (const feather::InputProblem& p : error.problems()) {
      FEATHER_CHECK(!p.file.empty() && !p.message.empty(), "a problem without file or message");
    }
  }
  return 0;
}
