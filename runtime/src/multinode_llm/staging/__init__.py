"""Staging a Hugging Face model onto the shared volume (`multinode-llm stage`), and the check
the head makes before it serves it."""
