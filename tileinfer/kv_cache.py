"""Static KV caches: one [max_positions, kv_heads, head_dim] buffer per layer; rolling back = a shorter length."""

import torch

KV_GRANULE = 1024  # capacity grows in steps of this many positions (fewer reallocations, fewer graph recaptures)


class KVCache:
    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, device):
        self.num_layers, self.num_kv_heads, self.head_dim = num_layers, num_kv_heads, head_dim
        self.dtype, self.device = dtype, device
        self.capacity = 0
        self.k = self.v = None

    def bytes_per_position(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * torch.finfo(self.dtype).bits // 8

    def ensure(self, positions: int, granule: int = KV_GRANULE) -> bool:
        """Grow to hold `positions`; True when the buffers were (re)allocated, which invalidates graphs."""
        if positions <= self.capacity:
            return False
        self.capacity = -(-positions // granule) * granule
        self.k = self.v = None
        shape = (self.num_layers, self.capacity, self.num_kv_heads, self.head_dim)
        self.k = torch.empty(shape, dtype=self.dtype, device=self.device)
        self.v = torch.empty(shape, dtype=self.dtype, device=self.device)
        return True
