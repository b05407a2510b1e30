"""feather: prefix-homogeneity-aware batch scheduling for LLM inference, from Python.

The C++ core through a thin binding (names follow the C++ in snake_case):

- ``ChunkedHashTree``: the Chunked Hash Tree prefix detector (insert tokens or block hashes,
  ``find_best``, ``add_to_batch``, ``finish``, ``remove``, ``requeue``, ``park``, ``unpark``).
- ``make_stop_policy`` / ``stop_policy_from_scenario`` and ``StopPolicy``: the stop policies
  (``decide``, ``on_step_executed`` with the step's reward, ``save`` / ``load``).
- ``BatchShapeTracker``: the batch shape a stop policy reads (``StopContext``'s batch fields),
  kept by a caller that owns the batch (the vLLM plugin).
- ``Simulation``: a scenario's serving loop one step at a time (``schedule``, ``complete``), for
  harnesses that run another scheduler in lockstep (``feather.vllm.conformance``).
- ``run``: ``feather run`` on a scenario, returning summary.json as a dict; ``read_results``
  reads the run's results.h5 into numpy arrays.

Bad input raises a Python exception (ValueError, TypeError, ``feather.InputError`` for a bad
scenario file, RuntimeError for files that cannot be read or written); nothing aborts.
"""

from feather._feather import (
    CASCADE_MIN_PREFIX_TOKENS,
    CASCADE_MIN_REQUESTS,
    MAX_SKIPS_PER_ROUND,
    BatchShapeTracker,
    ChtCandidate,
    ChunkedHashTree,
    HashScheme,
    InputError,
    PrefixSignal,
    Simulation,
    StateBins,
    StepFeedback,
    StopContext,
    StopDecision,
    StopPolicy,
    stop_policy_knobs,
    __version__,
    prefix_hashes,
    step_reward,
    stop_policy_names,
)
from feather._policies import make_stop_policy, stop_policy_from_scenario
from feather._results import Results, read_results
from feather._run import UnservedError, run

__all__ = [
    "CASCADE_MIN_PREFIX_TOKENS",
    "CASCADE_MIN_REQUESTS",
    "MAX_SKIPS_PER_ROUND",
    "BatchShapeTracker",
    "ChtCandidate",
    "ChunkedHashTree",
    "HashScheme",
    "InputError",
    "PrefixSignal",
    "Results",
    "Simulation",
    "StateBins",
    "StepFeedback",
    "StopContext",
    "StopDecision",
    "StopPolicy",
    "stop_policy_knobs",
    "UnservedError",
    "__version__",
    "make_stop_policy",
    "prefix_hashes",
    "read_results",
    "run",
    "step_reward",
    "stop_policy_from_scenario",
    "stop_policy_names",
]
