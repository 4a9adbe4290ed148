"""The packed rows on the training machine: batches of one row length at a time, drawn by the
curriculum, reply spans, and a held-out tail of each length."""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

BASE_SEQ_LEN = 2048  # batch sizes are given in rows of this length; longer rows come fewer per batch
WARMUP_SHORT = 0.3  # share of the run that trains on the shortest rows only


@dataclass
class Batch:
    x: torch.Tensor  # [B, seq_len] token ids
    lengths: torch.Tensor  # [B] real tokens per row
    spans: list  # per row, the (start, end) reply spans


class TrainData:
    def __init__(self, data_dir, held_out_rows=64):
        d = Path(data_dir)
        files = sorted(d.glob("tokens_*.npy"), key=lambda p: int(p.stem.split("_")[1]))
        if not files:
            raise FileNotFoundError(f"no tokens_<seq_len>.npy in {d}: build it with `python -m tools.train data`")
        self.buckets = {}
        for f in files:
            seq_len = int(f.stem.split("_")[1])
            tokens = np.load(f)
            spans = [[] for _ in range(len(tokens))]
            for r, s, e in np.load(d / f"replies_{seq_len}.npy"):
                spans[r].append((int(s), int(e)))
            held = min(max(1, held_out_rows * BASE_SEQ_LEN // seq_len), len(tokens) // 10)
            self.buckets[seq_len] = {"tokens": tokens, "lengths": np.load(d / f"lengths_{seq_len}.npy"),
                                     "spans": spans, "num_train": max(1, len(tokens) - held)}
        self.seq_lens = list(self.buckets)
        self.weights = [float(self.buckets[n]["lengths"].sum()) for n in self.seq_lens]

    def sample_seq_len(self, gen, progress):
        """Shortest rows only for the first WARMUP_SHORT of the run, then each length in proportion to
        its tokens."""
        if progress < WARMUP_SHORT or len(self.seq_lens) == 1:
            return self.seq_lens[0]
        w = torch.tensor(self.weights)
        return self.seq_lens[int(torch.multinomial(w / w.sum(), 1, generator=gen))]

    def rows(self, seq_len, idx, device):
        b = self.buckets[seq_len]
        x = torch.from_numpy(b["tokens"][idx].astype(np.int64)).to(device, non_blocking=True)
        lengths = torch.from_numpy(b["lengths"][idx].astype(np.int64)).to(device)
        return Batch(x, lengths, [b["spans"][r] for r in idx])

    def batch(self, batch_size, gen, device, progress=1.0):
        """`batch_size` rows of BASE_SEQ_LEN tokens' worth: fewer rows when the drawn length is longer."""
        seq_len = self.sample_seq_len(gen, progress)
        n = max(1, batch_size * BASE_SEQ_LEN // seq_len)
        idx = torch.randint(0, self.buckets[seq_len]["num_train"], (n,), generator=gen).numpy()
        return self.rows(seq_len, idx, device)

    def held_out(self, batch_size, device):
        """Batches of the held-out tail of each length: Batch with row-local spans."""
        for seq_len, b in self.buckets.items():
            n = max(1, batch_size * BASE_SEQ_LEN // seq_len)
            for i in range(b["num_train"], len(b["tokens"]), n):
                yield self.rows(seq_len, np.arange(i, min(i + n, len(b["tokens"]))), device)
