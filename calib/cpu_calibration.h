// cpu_calibration.h: what `feather calibrate --target cpu` measures, apart from the command
// line: the grid of synthetic steps, the machine probes, the base profile they give, and the
// grid measured on the real CPU engine through the engine-agnostic harness (calib/harness.h).
//
// CalibrationGrid: decode batches of 1 to 128 requests over private or shared contexts (1 to 20
// prefix groups, grouped or shuffled, cascade on and off), prefill chunks after cached contexts,
// and mixed steps, interleaved by a fixed stride permutation so that the held-out rows (every
// 5th) cover every kind. Quick mode keeps every kind with fewer sizes. The grid is plain
// SyntheticBatchSpecs (hw/synthetic_batch.h): a GPU target reuses it with larger sizes.
// RunProbes: DRAM read bandwidth (arrays ≫ LLC), the read bandwidth of an LLC-resident array,
// the read bandwidth of an array the size of the model's step weights (its linear layers'
// working set), the GEMM backend's peak FLOP/s. CpuBaseProfile: the fit's starting profile
// (peaks from the probes, `measured`; the rest assumed starting values). MeasureCpuGrid: one
// CpuEngine per cascade setting the grid needs, every point measured by MeasureSteps.
//
// Cost: the probes 0.2–0.7 s each (Quick() < 0.1 s); the grid (R + 1) passes of its steps
// (quick ~2 minutes on the reference 2-core VM, full ~8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "calib/harness.h"
#include "hw/cpu_engine.h"
#include "hw/gemm.h"
#include "hw/host_info.h"
#include "hw/probes.h"
#include "hw/synthetic_batch.h"
#include "sim/engine/device_profile.h"
#include "sim/engine/model_config.h"
#include "sim/engine/model_engine.h"

namespace feather::calib {

// One grid point: a synthetic step and whether the engine may use cascade attention.
struct GridPoint {
  hw::SyntheticBatchSpec spec;
  bool cascade = true;
  std::string label;
};

[[nodiscard]] std::vector<GridPoint> CalibrationGrid(bool quick);

// Sets every point's page size (SyntheticBatchSpec::block_tokens; the grid's own is 16): the
// same logical steps on pages of `block_tokens` tokens (`calibrate --block-tokens`), their shared
// prefixes held in as many whole pages as fit (hw/synthetic_batch.h).
void SetGridBlockTokens(std::vector<GridPoint>& grid, uint32_t block_tokens);

struct Probes {
  hw::BandwidthResult dram;  // the fastest DRAM probe: before the grid or between its passes
  hw::BandwidthResult llc;
  // The fastest read of an array of the model's step weights (ModelConfig::StepWeightBytes),
  // before the grid or between its passes; array_bytes 0: not taken.
  hw::BandwidthResult weights;
  hw::GemmFlopsResult gemm_peak;
  // The DRAM and weight probes' reads between the grid's passes (bytes/s,
  // ProbeBandwidthBetweenPasses), in order; empty when calibration took none.
  std::vector<double> dram_between_passes;
  std::vector<double> weights_between_passes;
};

// The DRAM probe's array: eight times the LLC (llc_bytes, as the host reports it; 0 when
// unknown) and at least 256 MiB.
[[nodiscard]] size_t DramProbeBytes(size_t llc_bytes);

// The probes, with or without `calibrate --quick` (which shrinks the grid only). They once took
// hw's Quick() settings with --quick, and on a noisy 2-vCPU VM those failed both ways
// (session 14, Zen 4 with a 32 MiB L3): 16 MiB "DRAM" arrays read the L3 at 65.6 GB/s where DRAM
// gives ~32, and 3 x 5 ms GEMM products read a peak of 33.7 GFLOP/s where it is ~200, and the fit
// anchored on them missed by 218 %. The full probes add about a second.
//
// The weight probe (weight_bytes > 0) reads one array of weight_bytes as decode steps read the
// weights: the whole working set, then again from its start, kWeightProbeStreams sequential
// streams a thread at once (a GEMV walks several weight columns or panels together). It is what
// the profile's weight_stream_bw_bytes_per_s records, the rate gemm_bw_efficiency is a fraction
// of. The DRAM probe (one stream a thread, STREAM's order; what the attention efficiencies and
// the foreign-host check refer to) under-reads that stream twice over on Intel Xeon VMs: with
// a 105 MiB L3 and cpu-small's 214 MB of fp32 weights one-token steps streamed them at 1.17x
// its fastest read and the fit wanted 1.25x (results/validation/issue-20-xeon-amx-1202), where
// the weights fit the L3 (a 260 MiB one) 1.6-1.75x. One stream a core is bound by how many of
// its lines the prefetchers keep in flight, not by the memory (hw/probes.h streams_per_thread);
// and a working set the LLC holds in part reads faster than the DRAM probe's 8x the LLC.
inline constexpr int kWeightProbeStreams = 8;
[[nodiscard]] Probes RunProbes(int threads, hw::GemmBackend backend, size_t llc_bytes,
                               size_t weight_bytes = 0);

// Reads the DRAM probe again (RunProbes' settings, about half a second), and the weight probe
// when RunProbes took one, and keeps each in `probes` when it is faster. Calibration calls it
// after every timed pass of the grid: on the 2-vCPU Zen 5 VM the DRAM probe read 33.6 GB/s
// before a grid whose weight streams ran at about 45 GB/s (2026-11-29), and the fit, which holds
// the bandwidth efficiencies at or below 1 of the probe, then missed its hold-out rows by
// 15.6 %. The fastest read over the grid's minutes is the peak its rows could have seen.
void ProbeBandwidthBetweenPasses(Probes& probes, int threads, size_t llc_bytes);

// The starting profile of a CPU fit: memory budget, peaks from the probes, sm_count = threads,
// and the engine's GEMM regime: with `packed_weights` (the engine multiplies every linear layer
// by its packed copy, hw/gemm.h) one roofline prices every step (gemm_skinny_max_tokens 0);
// without, the skinny kernel's rows (GemmSkinnyRows) are recorded for the skinny line.
[[nodiscard]] DeviceProfile CpuBaseProfile(const Probes& probes, const HostInfo& host, int threads,
                                           bool packed_weights = false);

// The attention kernels' tile step in use ("avx512", "avx2+fma" or "scalar"); the calibrated
// profile records it in measured_on.kernel_variant.
[[nodiscard]] std::string AttentionIsaName();

// The blocks of the largest grid point's step (each point built once to count them): the least
// pool MeasureCpuGrid can run the grid in. O(the grid's blocks).
[[nodiscard]] uint64_t LargestStepBlocks(std::span<const GridPoint> grid);

// Measures every grid point (its spec's pool_blocks set to `pool_blocks`) on CPU engines of
// `model` with `threads` threads and the points' page size (one for all; std::invalid_argument
// when they differ), `repetitions` timed passes; after_step / after_pass as in
// HarnessOptions. The engines take `engine_options` (kernel settings: the weights' layout, the
// skinny rows, the prefetch) with the thread count, cascade and `backend` set here; `primed` as
// HarnessOptions::primed. Returns the measurements in grid order (RowsOf gives the rows,
// StepNoiseOf the spread per term).
[[nodiscard]] std::vector<StepMeasurement> MeasureCpuGrid(
    std::vector<GridPoint>& grid, const ModelConfig& model, uint64_t pool_blocks, int threads,
    hw::GemmBackend backend, int repetitions, const std::function<void()>& after_step,
    const std::function<void(int pass)>& after_pass,
    const hw::CpuEngineOptions& engine_options = {}, bool primed = false);

}  // namespace feather::calib
