// selfcheck_command.cc: `feather selfcheck --target cuda` (see selfcheck_command.h).
#include "cli/selfcheck_command.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "cli/atomic_file.h"
#include "hw/cuda/device.h"
#include "hw/cuda/selfcheck_stamp.h"
#include "hw/host_info.h"
#if FEATHER_HAVE_CUDA
#include "hw/cuda/selfcheck.h"
#endif

namespace feather {

std::string CudaTargetGate() {
  const hw::cuda::CudaDeviceInfo device = hw::cuda::QueryCudaDevice();
  return device.available ? "" : device.why_not;
}

std::string SelfcheckStampGate(const std::string& stamp_path) {
  std::ifstream in(stamp_path);
  if (!in) {
    return "no self-check stamp at " + stamp_path +
           "; run `feather selfcheck --target cuda` on this GPU first";
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string error;
  const auto stamp = hw::cuda::ParseStamp(text.str(), stamp_path, &error);
  if (!stamp) return error;
  const hw::cuda::CudaDeviceInfo device = hw::cuda::QueryCudaDevice();
  const std::string why = hw::cuda::StampAllows(*stamp, device.uuid, ReadHostInfo().git_rev);
  return why.empty() ? "" : stamp_path + ": " + why + "; rerun `feather selfcheck --target cuda`";
}

int SelfcheckCommand(const SelfcheckCommandOptions& options, std::ostream& out) {
  if (options.target != "cuda") {
    throw std::invalid_argument(
        "--target must be cuda (the CPU kernels are checked by the test "
        "suite), got '" +
        options.target + "'");
  }
  const hw::cuda::CudaDeviceInfo device = hw::cuda::QueryCudaDevice();
  if (!device.available) {
    std::cerr << "feather selfcheck --target cuda: " << device.why_not << '\n';
    return 2;
  }
#if FEATHER_HAVE_CUDA
  hw::cuda::SelfcheckStamp stamp = hw::cuda::RunCudaSelfcheck(device, out);
  const HostInfo host = ReadHostInfo();
  stamp.git_rev = host.git_rev;
  stamp.feather_version = host.feather_version;
  stamp.date_utc = host.date_utc;
  const std::filesystem::path path(options.stamp_path);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  WriteFileAtomically(path, hw::cuda::StampToJson(stamp));
  size_t failed = 0;
  for (const hw::cuda::SelfcheckResult& r : stamp.results) failed += r.passed ? 0 : 1;
  out << (stamp.passed ? "PASS" : "FAIL") << ": " << stamp.results.size() - failed << " of "
      << stamp.results.size() << " checks passed; stamp " << options.stamp_path << '\n';
  return stamp.passed ? 0 : 1;
#else
  std::cerr << "feather selfcheck --target cuda: this feather was built without CUDA\n";
  return 2;
#endif
}

}  // namespace feather
