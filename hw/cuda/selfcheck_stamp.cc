// selfcheck_stamp.cc: the self-check stamp's JSON and the calibration gate (see
// selfcheck_stamp.h).
#include "hw/cuda/selfcheck_stamp.h"

#include <nlohmann/json.hpp>

namespace feather::hw::cuda {

std::string StampToJson(const SelfcheckStamp& stamp) {
  nlohmann::json results = nlohmann::json::array();
  for (const SelfcheckResult& r : stamp.results) {
    results.push_back({{"kernel", r.kernel},
                       {"passed", r.passed},
                       {"max_abs_error", r.max_abs_error},
                       {"tolerance", r.tolerance},
                       {"detail", r.detail}});
  }
  const nlohmann::json json = {{"passed", stamp.passed},
                               {"device_name", stamp.device_name},
                               {"device_uuid", stamp.device_uuid},
                               {"git_rev", stamp.git_rev},
                               {"feather_version", stamp.feather_version},
                               {"date_utc", stamp.date_utc},
                               {"results", results}};
  return json.dump(2) + "\n";
}

std::optional<SelfcheckStamp> ParseStamp(const std::string& text, const std::string& path,
                                         std::string* error) {
  auto fail = [&](const std::string& what) -> std::optional<SelfcheckStamp> {
    if (error != nullptr) *error = path + ": " + what;
    return std::nullopt;
  };
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return fail("not valid JSON");
  if (!json.is_object()) return fail("expected a JSON object");
  SelfcheckStamp stamp;
  auto string_field = [&](const char* key, std::string& out) {
    const auto it = json.find(key);
    if (it == json.end() || !it->is_string()) return false;
    out = it->get<std::string>();
    return true;
  };
  const auto passed = json.find("passed");
  if (passed == json.end() || !passed->is_boolean())
    return fail("field 'passed': expected true or false");
  stamp.passed = passed->get<bool>();
  for (const auto& [key, out] :
       {std::pair<const char*, std::string*>{"device_name", &stamp.device_name},
        {"device_uuid", &stamp.device_uuid},
        {"git_rev", &stamp.git_rev},
        {"feather_version", &stamp.feather_version},
        {"date_utc", &stamp.date_utc}}) {
    if (!string_field(key, *out))
      return fail(std::string("field '") + key + "': expected a string");
  }
  const auto results = json.find("results");
  if (results == json.end() || !results->is_array())
    return fail("field 'results': expected an array");
  for (size_t i = 0; i < results->size(); ++i) {
    const nlohmann::json& r = (*results)[i];
    const std::string where = "field 'results[" + std::to_string(i) + "]'";
    if (!r.is_object() || !r.contains("kernel") || !r["kernel"].is_string() ||
        !r.contains("passed") || !r["passed"].is_boolean()) {
      return fail(where + ": expected an object with 'kernel' (string) and 'passed' (bool)");
    }
    SelfcheckResult result;
    result.kernel = r["kernel"].get<std::string>();
    result.passed = r["passed"].get<bool>();
    if (r.contains("max_abs_error") && r["max_abs_error"].is_number()) {
      result.max_abs_error = r["max_abs_error"].get<double>();
    }
    if (r.contains("tolerance") && r["tolerance"].is_number()) {
      result.tolerance = r["tolerance"].get<double>();
    }
    if (r.contains("detail") && r["detail"].is_string())
      result.detail = r["detail"].get<std::string>();
    stamp.results.push_back(std::move(result));
  }
  return stamp;
}

std::string StampAllows(const SelfcheckStamp& stamp, const std::string& device_uuid,
                        const std::string& git_rev) {
  if (!stamp.passed) return "the last self-check on " + stamp.device_name + " failed";
  for (const SelfcheckResult& r : stamp.results) {
    if (!r.passed) return "the self-check stamp lists a failed kernel: " + r.kernel;
  }
  if (stamp.results.empty()) return "the self-check stamp lists no kernel";
  if (stamp.device_uuid != device_uuid) {
    return "the self-check ran on another device (" + stamp.device_name + ", " + stamp.device_uuid +
           "), not " + device_uuid;
  }
  if (stamp.git_rev != git_rev) {
    return "the self-check ran on build " + stamp.git_rev + ", this is " + git_rev;
  }
  return "";
}

}  // namespace feather::hw::cuda
