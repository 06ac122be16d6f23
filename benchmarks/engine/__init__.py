"""The embedded engine on the dev CPU: decode against HF and llama.cpp (engine), the draft,
the forward's parts, KV layout, the skinny-matmul kernels, speculative phases, the
scheduler's overhead and the start-up profile's B."""
