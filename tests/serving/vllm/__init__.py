"""A mock of vLLM for Causeway's serving tests: only `vllm.entrypoints.openai.api_server`, run
with `python3 -m` exactly as vLLM's own server is, so the tracer tells it by its command line."""
