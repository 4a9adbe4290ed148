"""Render the benchmark prompts for one tokenizer and store them under tileinfer_profiling/prompts/data/.

    python -m tileinfer_profiling.prompts --tokenizer PATH --name NAME [--seed 0] [--points 1k,8k]

PATH is a tokenizer.json, a checkpoint directory holding one, or "byte" (the ByteTokenizer, whose
texts are also written as data/<task>-<point>.txt for reading).
"""

import argparse

from tileinfer_profiling.prompts.render import DATA, POINTS, TASKS, build_prompt, store_prompt, tokenizer_from_path


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tileinfer_profiling.prompts", description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", required=True, help='tokenizer.json, its directory, or "byte"')
    ap.add_argument("--name", required=True, help="directory name under tileinfer_profiling/prompts/data/")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--points", default="1k,8k")
    ap.add_argument("--tasks", default=",".join(TASKS))
    args = ap.parse_args(argv)
    tokenizer = tokenizer_from_path(args.tokenizer)
    for point in args.points.split(","):
        for task in args.tasks.split(","):
            prompt = build_prompt(task, POINTS[point].prompt_tokens, tokenizer, args.seed)
            path = store_prompt(prompt, args.name, point)
            if args.name == "byte":
                (DATA / f"{task}-{point}.txt").write_text(prompt.text)
            print(f"{path}: {len(prompt.ids)} tokens, {len(prompt.text)} characters")


if __name__ == "__main__":
    main()
