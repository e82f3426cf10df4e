"""A Hugging Face Hub-compatible pull-through cache whose nodes share blobs peer to peer."""
