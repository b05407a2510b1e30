// bindings.h: the parts of the `feather._feather` extension module, one function per C++ area.
// Each adds its classes and functions to the module; module.cc calls them in order. The binding
// layer is thin: names follow the C++ in snake_case, and the only code here is argument
// checking, so that bad input from Python raises a Python exception instead of reaching a
// FEATHER_CHECK (which aborts the interpreter).
#pragma once

#include <nanobind/nanobind.h>

namespace feather::python {

void BindChunkedHashTree(nanobind::module_& m);  // cht_bindings.cc
void BindStopPolicies(nanobind::module_& m);     // stop_policy_bindings.cc
void BindRun(nanobind::module_& m);              // run_bindings.cc: sim/ and cli/
void BindSimulation(nanobind::module_& m);       // simulation_bindings.cc: sim/, step by step
void BindBatchShape(nanobind::module_& m);       // batch_shape_bindings.cc: policies/batch_shape.h

}  // namespace feather::python
