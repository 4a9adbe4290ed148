"""TileInfer's benchmarks: the reference comparison with vLLM, kernel and engine benchmarks, their recorded
results and the report runner. Run from the repository root; not installed."""
