"""The reference comparison with vLLM: the metric, both engines' scripts, and the published figures."""
