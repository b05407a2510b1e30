"""feather and vLLM: Feather as a vLLM scheduler (``feather.vllm.FeatherScheduler``, the module
``feather.vllm.scheduler``) and the conformance check of feather's vLLM model against vLLM's own
Scheduler (``feather.vllm.conformance``).

Importing this package does not import vLLM; ``FeatherScheduler`` and the modules do, and need
the vLLM environment (``scripts/vllm-conformance.sh`` creates it). ``FeatherScheduler`` is
resolved on first access (PEP 562), so ``--scheduler-cls feather.vllm.FeatherScheduler``, which
vLLM resolves with ``importlib.import_module("feather.vllm")`` then ``getattr``, works.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "FeatherScheduler":
        from feather.vllm.scheduler import FeatherScheduler

        return FeatherScheduler
    raise AttributeError(f"module 'feather.vllm' has no attribute {name!r}")
