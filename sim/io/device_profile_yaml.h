// device_profile_yaml.h: reading and writing device profiles as YAML (schema:
// results/profiles/README.md). The profile itself, its parameter table and provenance are
// sim/engine/device_profile.h; this is the I/O edge that knows yaml-cpp and the file format.
#pragma once

#include <string>
#include <string_view>

#include "sim/engine/device_profile.h"

namespace feather {

// Parses a profile (schema: results/profiles/README.md). `display_name` names the source in
// problems. Throws InputError naming file:line:key for every missing, mistyped, out-of-range or
// unknown field and every bad `source`, all at once.
[[nodiscard]] DeviceProfile ParseDeviceProfile(std::string_view yaml_text,
                                               const std::string& display_name);
// Reads and parses the file at `path`; an unreadable file is an InputError too.
[[nodiscard]] DeviceProfile LoadDeviceProfile(const std::string& path);

// The profile as YAML in the schema the loader reads (results/profiles/README.md): name, device,
// notes (when not empty), provenance, measured_on and fit (when present), then every parameter
// with value, source and note. Strings are double-quoted with escapes; numbers are written in the
// shortest form that reads back to the same double, so parsing the text gives `profile` back.
// Writes what it is given: a profile the loader would reject (an empty note, a value out of
// range) is written as is, and loading the text then reports it.
[[nodiscard]] std::string DeviceProfileToYaml(const DeviceProfile& profile);

}  // namespace feather
