"""TileInfer's benchmarks: the prompts, the reference comparison with vLLM, and results by feature."""
