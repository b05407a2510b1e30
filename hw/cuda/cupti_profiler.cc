// cupti_profiler.cc: CuptiRangeProfiler (see cupti_profiler.h), the one translation unit that
// calls CUPTI. Sequence, as NVIDIA's range_profiling sample does it:
//   setup    cuptiProfilerInitialize; cuptiDeviceGetChipName; cuptiProfilerGetCounterAvailability
//            on the context; cuptiProfilerHostInitialize (range profiler, chip, availability);
//            cuptiProfilerHostConfigAddMetrics; cuptiProfilerHostGetConfigImage; GetNumOfPasses;
//            cuptiRangeProfilerEnable on the context.
//   measure  GetCounterDataSize + CounterDataImageInitialize; SetConfig (user range, user replay,
//            one nesting level); per pass Start, PushRange, work, PopRange, Stop until every
//            pass is submitted; DecodeData; GetCounterDataInfo; EvaluateToGpuValues on range 0.
// The context comes from the driver's cuCtxGetCurrent, reached through the runtime's
// cudaGetDriverEntryPointByVersion so the binary does not link libcuda (a machine without a
// driver must still start feather).
#include "hw/cuda/cupti_profiler.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_result.h>
#include <cupti_target.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "hw/cuda/cuda_check.h"

#define FEATHER_CUPTI_CHECK(call)                                                         \
  do {                                                                                    \
    const CUptiResult feather_cupti_status = (call);                                      \
    if (feather_cupti_status != CUPTI_SUCCESS) {                                          \
      const char* feather_cupti_text = "unknown CUPTI error";                             \
      cuptiGetResultString(feather_cupti_status, &feather_cupti_text);                    \
      ::feather::hw::cuda::ThrowCudaError(#call, __FILE__, __LINE__, feather_cupti_text); \
    }                                                                                     \
  } while (0)

namespace feather::hw::cuda {
namespace {

CUcontext CurrentContext() {
  FEATHER_CUDA_CHECK(cudaFree(nullptr));  // initialises the primary context
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  FEATHER_CUDA_CHECK(
      cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    throw std::runtime_error("CUPTI: the driver has no cuCtxGetCurrent");
  }
  using GetCurrent = CUresult (*)(CUcontext*);
  CUcontext context = nullptr;
  if (reinterpret_cast<GetCurrent>(fn)(&context) != CUDA_SUCCESS || context == nullptr) {
    throw std::runtime_error("CUPTI: no current CUDA context");
  }
  return context;
}

}  // namespace

struct CuptiRangeProfiler::State {
  CUcontext context = nullptr;
  std::string chip;
  std::vector<uint8_t> availability;
  std::vector<uint8_t> config;
  CUpti_Profiler_Host_Object* host = nullptr;
  CUpti_RangeProfiler_Object* profiler = nullptr;
  size_t passes = 1;
};

CuptiRangeProfiler::CuptiRangeProfiler() : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.context = CurrentContext();
  CUpti_Profiler_Initialize_Params init{CUpti_Profiler_Initialize_Params_STRUCT_SIZE, nullptr};
  FEATHER_CUPTI_CHECK(cuptiProfilerInitialize(&init));

  int device = 0;
  FEATHER_CUDA_CHECK(cudaGetDevice(&device));
  CUpti_Device_GetChipName_Params chip{};
  chip.structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE;
  chip.deviceIndex = static_cast<size_t>(device);
  FEATHER_CUPTI_CHECK(cuptiDeviceGetChipName(&chip));
  s.chip = chip.pChipName;

  CUpti_Profiler_GetCounterAvailability_Params avail{};
  avail.structSize = CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE;
  avail.ctx = s.context;
  FEATHER_CUPTI_CHECK(cuptiProfilerGetCounterAvailability(&avail));
  s.availability.resize(avail.counterAvailabilityImageSize);
  avail.pCounterAvailabilityImage = s.availability.data();
  FEATHER_CUPTI_CHECK(cuptiProfilerGetCounterAvailability(&avail));

  CUpti_Profiler_Host_Initialize_Params host{};
  host.structSize = CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE;
  host.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
  host.pChipName = s.chip.c_str();
  host.pCounterAvailabilityImage = s.availability.data();
  FEATHER_CUPTI_CHECK(cuptiProfilerHostInitialize(&host));
  s.host = host.pHostObject;

  std::vector<const char*> names(kCuptiMetricNames.begin(), kCuptiMetricNames.end());
  CUpti_Profiler_Host_ConfigAddMetrics_Params add{};
  add.structSize = CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE;
  add.pHostObject = s.host;
  add.ppMetricNames = names.data();
  add.numMetrics = names.size();
  FEATHER_CUPTI_CHECK(cuptiProfilerHostConfigAddMetrics(&add));

  CUpti_Profiler_Host_GetConfigImageSize_Params size{};
  size.structSize = CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE;
  size.pHostObject = s.host;
  FEATHER_CUPTI_CHECK(cuptiProfilerHostGetConfigImageSize(&size));
  s.config.resize(size.configImageSize);
  CUpti_Profiler_Host_GetConfigImage_Params image{};
  image.structSize = CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE;
  image.pHostObject = s.host;
  image.configImageSize = s.config.size();
  image.pConfigImage = s.config.data();
  FEATHER_CUPTI_CHECK(cuptiProfilerHostGetConfigImage(&image));

  CUpti_Profiler_Host_GetNumOfPasses_Params passes{};
  passes.structSize = CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE;
  passes.configImageSize = s.config.size();
  passes.pConfigImage = s.config.data();
  FEATHER_CUPTI_CHECK(cuptiProfilerHostGetNumOfPasses(&passes));
  s.passes = passes.numOfPasses;

  CUpti_RangeProfiler_Enable_Params enable{};
  enable.structSize = CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE;
  enable.ctx = s.context;
  FEATHER_CUPTI_CHECK(cuptiRangeProfilerEnable(&enable));
  s.profiler = enable.pRangeProfilerObject;
}

CuptiRangeProfiler::~CuptiRangeProfiler() {
  State& s = *state_;
  if (s.profiler != nullptr) {
    CUpti_RangeProfiler_Disable_Params disable{};
    disable.structSize = CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE;
    disable.pRangeProfilerObject = s.profiler;
    cuptiRangeProfilerDisable(&disable);
  }
  if (s.host != nullptr) {
    CUpti_Profiler_Host_Deinitialize_Params deinit{};
    deinit.structSize = CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE;
    deinit.pHostObject = s.host;
    cuptiProfilerHostDeinitialize(&deinit);
  }
  CUpti_Profiler_DeInitialize_Params done{CUpti_Profiler_DeInitialize_Params_STRUCT_SIZE, nullptr};
  cuptiProfilerDeInitialize(&done);
}

int CuptiRangeProfiler::passes() const { return static_cast<int>(state_->passes); }

CuptiCounters CuptiRangeProfiler::Measure(const std::string& name,
                                          const std::function<void()>& work) {
  State& s = *state_;
  std::vector<const char*> names(kCuptiMetricNames.begin(), kCuptiMetricNames.end());
  CUpti_RangeProfiler_GetCounterDataSize_Params size{};
  size.structSize = CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE;
  size.pRangeProfilerObject = s.profiler;
  size.pMetricNames = names.data();
  size.numMetrics = names.size();
  size.maxNumOfRanges = 1;
  size.maxNumRangeTreeNodes = 1;
  FEATHER_CUPTI_CHECK(cuptiRangeProfilerGetCounterDataSize(&size));
  std::vector<uint8_t> counter_data(size.counterDataSize);
  CUpti_RangeProfiler_CounterDataImage_Initialize_Params init{};
  init.structSize = CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE;
  init.pRangeProfilerObject = s.profiler;
  init.counterDataSize = counter_data.size();
  init.pCounterData = counter_data.data();
  FEATHER_CUPTI_CHECK(cuptiRangeProfilerCounterDataImageInitialize(&init));

  CUpti_RangeProfiler_SetConfig_Params config{};
  config.structSize = CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE;
  config.pRangeProfilerObject = s.profiler;
  config.configSize = s.config.size();
  config.pConfig = s.config.data();
  config.counterDataImageSize = counter_data.size();
  config.pCounterDataImage = counter_data.data();
  config.range = CUPTI_UserRange;
  config.replayMode = CUPTI_UserReplay;
  config.maxRangesPerPass = 1;
  config.numNestingLevels = 1;
  config.minNestingLevel = 1;
  config.passIndex = 0;
  config.targetNestingLevel = 1;
  FEATHER_CUPTI_CHECK(cuptiRangeProfilerSetConfig(&config));

  for (size_t pass = 0;; ++pass) {
    if (pass > 64) throw std::runtime_error("CUPTI: more than 64 replay passes for " + name);
    CUpti_RangeProfiler_Start_Params start{};
    start.structSize = CUpti_RangeProfiler_Start_Params_STRUCT_SIZE;
    start.pRangeProfilerObject = s.profiler;
    FEATHER_CUPTI_CHECK(cuptiRangeProfilerStart(&start));
    CUpti_RangeProfiler_PushRange_Params push{};
    push.structSize = CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE;
    push.pRangeProfilerObject = s.profiler;
    push.pRangeName = name.c_str();
    FEATHER_CUPTI_CHECK(cuptiRangeProfilerPushRange(&push));
    work();
    FEATHER_CUDA_CHECK(cudaDeviceSynchronize());
    CUpti_RangeProfiler_PopRange_Params pop{};
    pop.structSize = CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE;
    pop.pRangeProfilerObject = s.profiler;
    FEATHER_CUPTI_CHECK(cuptiRangeProfilerPopRange(&pop));
    CUpti_RangeProfiler_Stop_Params stop{};
    stop.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE;
    stop.pRangeProfilerObject = s.profiler;
    FEATHER_CUPTI_CHECK(cuptiRangeProfilerStop(&stop));
    if (stop.isAllPassSubmitted != 0) break;
  }
  CUpti_RangeProfiler_DecodeData_Params decode{};
  decode.structSize = CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE;
  decode.pRangeProfilerObject = s.profiler;
  FEATHER_CUPTI_CHECK(cuptiRangeProfilerDecodeData(&decode));

  CUpti_RangeProfiler_GetCounterDataInfo_Params info{};
  info.structSize = CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE;
  info.pCounterDataImage = counter_data.data();
  info.counterDataImageSize = counter_data.size();
  FEATHER_CUPTI_CHECK(cuptiRangeProfilerGetCounterDataInfo(&info));
  if (info.numTotalRanges < 1) throw std::runtime_error("CUPTI: no range recorded for " + name);

  std::vector<double> values(names.size());
  CUpti_Profiler_Host_EvaluateToGpuValues_Params eval{};
  eval.structSize = CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE;
  eval.pHostObject = s.host;
  eval.pCounterDataImage = counter_data.data();
  eval.counterDataImageSize = counter_data.size();
  eval.rangeIndex = 0;
  eval.ppMetricNames = names.data();
  eval.numMetrics = names.size();
  eval.pMetricValues = values.data();
  FEATHER_CUPTI_CHECK(cuptiProfilerHostEvaluateToGpuValues(&eval));

  std::string error;
  const auto counters = ParseRangeValues(name, values.data(), values.size(), &error);
  if (!counters) throw std::runtime_error(error);
  return *counters;
}

}  // namespace feather::hw::cuda
