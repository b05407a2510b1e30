// module.cc: the `feather._feather` extension module (imported by the `feather` package, whose
// __init__.py re-exports it with a few pure-Python helpers).
#include <nanobind/nanobind.h>

#include "python/src/bindings.h"

NB_MODULE(_feather, m) {
  m.doc() =
      "feather's C++ core: the Chunked Hash Tree, the stop policies and scenario runs. Import "
      "the `feather` package rather than this module.";
  m.attr("__version__") = FEATHER_VERSION;
  feather::python::BindChunkedHashTree(m);
  feather::python::BindStopPolicies(m);
  feather::python::BindRun(m);
  feather::python::BindSimulation(m);
  feather::python::BindBatchShape(m);
}
