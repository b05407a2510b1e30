"""feather and vLLM: the conformance check of feather's vLLM model against vLLM's own Scheduler
(``feather.vllm.conformance``).

Importing this package does not import vLLM; its modules do, and need the vLLM environment
(``scripts/vllm-conformance.sh`` creates it).
"""
