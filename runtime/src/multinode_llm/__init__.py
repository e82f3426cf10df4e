"""multinode-llm: serve a Hugging Face LLM across Kubernetes nodes with KServe, Ray and vLLM."""

__version__ = "0.1.0"
