"""Training scripts for the embedded default pair: a small Qwen3 target and its DFlash drafter.

    python -m tools.train data  --out .train_data        # CPU: tokenizer, packed tokens, eval prompts
    python -m tools.train train --data .train_data --out OUT   # GPU: target, drafter, acceptance
"""
