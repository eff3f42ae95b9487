"""The mock vLLM's OpenAI-compatible server."""
