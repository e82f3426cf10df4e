"""Serving: the vLLM OpenAI server's command line and the KServe protocol middleware."""
