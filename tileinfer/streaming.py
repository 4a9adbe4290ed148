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
    engine._committed = lambda ids: on_tokens(list(ids))
    try:
        yield
    finally:
        del engine._committed  # the class's method again


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
