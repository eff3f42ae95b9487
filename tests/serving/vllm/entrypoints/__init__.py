"""The mock vLLM's entrypoints."""
