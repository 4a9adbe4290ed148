"""Tokens as a generation commits them, for a caller that shows progress (the `tileinfer generate` command).

    with watch(engine, on_tokens):           # on_tokens(ids): the first token, then each step's
        out = engine.generate(prompt, 128)
    text = TextStream(engine.tokenizer, sys.stdout.write)   # an on_tokens that prints decoded text
"""

import contextlib


@contextlib.contextmanager
def watch(engine, on_tokens):
    """Within the block, call `on_tokens(list of ids)` with the token prefill produces and with the tokens
    each step commits, in order: together they are the generation's `tokens`. The engine is left as it
    was when the block ends."""
    prefill, read = engine.prefill, engine._read

    def prefill_and_report(ids, draft=True):
        first = prefill(ids, draft)
        on_tokens([int(first.reshape(-1)[0].item())])
        return first

    def read_and_report(step, start, max_length, stop):
        committed, stopped, cut = read(step, start, max_length, stop)
        on_tokens([int(t) for t in committed])
        return committed, stopped, cut

    engine.prefill, engine._read = prefill_and_report, read_and_report
    try:
        yield
    finally:
        del engine.prefill, engine._read  # the class's methods again


class TextStream:
    """An `on_tokens` that writes the decoded text as it grows. Text ending in an incomplete UTF-8
    character ("\ufffd") is held back until the next tokens complete it."""

    def __init__(self, tokenizer, write):
        self.tokenizer, self.write = tokenizer, write
        self.ids, self.shown = [], ""

    def __call__(self, ids):
        self.ids += ids
        text = self.tokenizer.decode(self.ids).rstrip("\ufffd")
        if text.startswith(self.shown) and len(text) > len(self.shown):
            self.write(text[len(self.shown):])
            self.shown = text

    def finish(self, text):
        """Write what the final `text` adds to what was shown (all of it, on a new line, if the two differ)."""
        if text.startswith(self.shown):
            self.write(text[len(self.shown):])
        else:
            self.write("\n" + text)
