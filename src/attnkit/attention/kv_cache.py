"""The key/value cache of incremental (one token at a time) decoding, in reused buffers.

A Transformer decoder step attends over the keys and values of every token decoded so far. Kept as
plain tensors, each beam-search step copies them all twice: once to append the new position
(``torch.cat``), and once more when the rows are reordered to follow the back-pointers
(``index_select``), each time into newly allocated memory. Here:

- **reorder** gathers the rows it keeps into a buffer shaped ``(R', H, N + 1, Dh)``, one position
  longer than the cache, so that the next **append** writes in place (``buf[:, :, N] = k_new``): one
  copy per step instead of two;
- a buffer is a view of a flat storage that the caches of one layer reuse, step after step (two
  storages in turn: the gather reads one and writes the other), so nothing is allocated after the
  first steps;
- the keys attention reads are a whole buffer, contiguous: the batched products ``q·kᵀ`` and
  ``p·v`` run several times slower on strided views with spare capacity (measured on the CPU).

Without a reorder (greedy search) an append moves the cache to the other storage, one position
longer (the copy ``torch.cat`` made, into reused memory). The gather views each buffer as
``(R·H, T·Dh)`` rows and copies the first ``N·Dh`` elements of rows ``index[r]·H + h``: runs of
contiguous memory, the fast path of ``index_select``.

**What a cache object promises** (the contract the searches rely on, unchanged from caches of plain
tensors): a :class:`KVCache` object always describes the same keys and values (its rows, its
length), whatever is done later with copies of it. An append writes in place only into the room
past the end of the appending cache, and only when no other cache appended there first (two steps
from one state: a branch); otherwise it copies. A buffer is reshaped or overwritten only when no
living cache reads it (tracked with weak references: a dropped decoder state frees its buffer at
once). The tensors :attr:`KVCache.k` / :attr:`KVCache.v` return are views into these buffers: clone
them to keep them after the decoding goes on.
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor

__all__ = ["KVCache"]


class _Storage:
    """Flat key and value storages, and the buffer views ``(R, H, T, Dh)`` they hold now.

    ``filled``: positions of the view written so far; ``readers``: the living caches that read the
    views (weak references, so that a dropped decoder state frees the storage for reuse)."""

    __slots__ = ("filled", "k", "k_flat", "readers", "v", "v_flat")

    def __init__(self, like: Tensor, numel: int):
        self.k_flat = like.new_empty(numel)
        self.v_flat = like.new_empty(numel)
        self.k = self.v = None
        self.filled = 0
        self.readers: weakref.WeakSet = weakref.WeakSet()

    def fits(self, like: Tensor, numel: int) -> bool:
        return self.k_flat.numel() >= numel and self.k_flat.dtype == like.dtype and self.k_flat.device == like.device

    def shape(self, rows: int, heads: int, length: int, dh: int) -> None:
        n = rows * heads * length * dh
        self.k = self.k_flat[:n].view(rows, heads, length, dh)  # (R, H, T, Dh), contiguous
        self.v = self.v_flat[:n].view(rows, heads, length, dh)
        self.filled = 0


class KVCache:
    """The keys and values one attention layer keeps across incremental decoding steps.

    ``k``, ``v``: ``(B, H, N, Dh)`` or ``None`` while empty. A **growing** cache (self-attention)
    appends each step's keys/values (:meth:`extend`) into reused buffers (see the module
    docstring); a **static** cache (cross-attention) holds keys/values projected once from the
    encoder output and reused by every step.

    :class:`MultiHeadAttention` changes a cache object only through :meth:`extend`, and a copy taken
    before a step (:meth:`copy`) still describes the old state and may be stepped again (beam search
    and the tests rely on this). ``KVCache(k, v)`` makes a growing cache holding ``k``/``v`` (copied
    into a buffer); ``KVCache(k, v, static=True)`` keeps the tensors themselves (made contiguous).
    """

    __slots__ = ("__weakref__", "_family", "_k", "_n", "_store", "_v", "_vk", "_vv", "static")

    def __init__(self, k: Tensor | None = None, v: Tensor | None = None, *, static: bool = False):
        if (k is None) != (v is None):
            raise ValueError("KVCache: give both k and v, or neither")
        self.static = static
        self._k = self._v = None  # static caches, and growing ones under autograd: plain tensors
        self._store: _Storage | None = None  # growing caches: the storage holding ...
        self._vk = self._vv = None  # ... this cache's buffer views (R, H, T, Dh), T >= N
        self._family: list[_Storage] = []  # storages this cache and its copies/reorders may reuse
        self._n = 0
        if k is not None:
            if static:  # contiguous: the products with kᵀ and v read it in place, every step
                self._k, self._v = k.contiguous(), v.contiguous()
            else:
                self.extend(k, v)

    # --- reading ------------------------------------------------------------------------------
    @property
    def empty(self) -> bool:
        return self._store is None and self._k is None

    @property
    def per_source(self) -> bool:
        """A static cache holds the source's keys/values: the same for every beam of a sentence
        (:func:`attnkit.decoding.reorder_state` shares it instead of copying it)."""
        return self.static

    @property
    def k(self) -> Tensor | None:
        """Keys ``(B, H, N, Dh)`` (a view into a reused buffer for a growing cache), ``None`` while empty."""
        if self._store is None:
            return self._k
        return self._vk if self._vk.shape[2] == self._n else self._vk[:, :, : self._n]

    @property
    def v(self) -> Tensor | None:
        """Values ``(B, H, N, Dh)``, like :attr:`k`."""
        if self._store is None:
            return self._v
        return self._vv if self._vv.shape[2] == self._n else self._vv[:, :, : self._n]

    def __len__(self) -> int:
        """Cached positions ``N``."""
        if self._store is not None:
            return self._n
        return 0 if self._k is None else self._k.shape[2]

    # --- buffers ------------------------------------------------------------------------------
    def _attach(self, store: _Storage, n: int) -> None:
        if self._store is not None:
            self._store.readers.discard(self)
        self._store, self._vk, self._vv, self._n = store, store.k, store.v, n
        store.readers.add(self)
        if store not in self._family:
            self._family.append(store)

    def _free_storage(self, like: Tensor, numel: int) -> _Storage:
        """A storage of this family that no living cache reads and that holds ``numel`` elements,
        or a new one (free storages too small to be reused are dropped from the family)."""
        found = None
        keep = []
        for store in self._family:
            free = len(store.readers) == 0
            if free and found is None and store.fits(like, numel):
                found = store
            elif not free or store.fits(like, numel):
                keep.append(store)
        if found is None:  # room to grow: a storage is reshaped, one position longer, every step
            found = _Storage(like, numel + numel // 2)
        self._family[:] = [*keep, found]  # in place: the list is shared by the whole family
        return found

    # --- writing ------------------------------------------------------------------------------
    def extend(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``(B, H, n, Dh)`` keys/values (or fill a static cache once); returns all of them."""
        if self.static:
            if self._k is None:
                self._k, self._v = k.contiguous(), v.contiguous()
            return self._k, self._v
        if k.shape != v.shape:
            raise ValueError(f"KVCache.extend: k {tuple(k.shape)} and v {tuple(v.shape)} must have the same shape")
        if self._k is not None or (torch.is_grad_enabled() and (k.requires_grad or v.requires_grad)):
            return self._extend_plain(k, v)  # autograd: plain tensors (in-place writes would break it)
        rows, heads, n, dh = k.shape
        old, store = self._n, self._store
        if store is not None and (rows, heads, dh) != (self._vk.shape[0], self._vk.shape[1], self._vk.shape[3]):
            raise ValueError(
                f"KVCache.extend: the cache holds {tuple(self.k.shape)}, the new keys are {tuple(k.shape)}"
            )
        if store is None or store.filled != old or self._vk.shape[2] < old + n or store.k is not self._vk:
            # no room past the end, or another cache appended there first: move to a buffer of the exact size
            new = self._free_storage(k, rows * heads * (old + n) * dh)
            new.shape(rows, heads, old + n, dh)
            if old:
                new.k[:, :, :old] = self._vk[:, :, :old]
                new.v[:, :, :old] = self._vv[:, :, :old]
            self._attach(new, old)
            store = new
        self._vk[:, :, old : old + n] = k  # (B, H, N_past + n, Dh) filled
        self._vv[:, :, old : old + n] = v
        store.filled = self._n = old + n
        return self.k, self.v

    def _extend_plain(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self._store is not None:  # switch to plain tensors
            self._k, self._v = self.k.clone(), self.v.clone()
            self._store.readers.discard(self)
            self._store = self._vk = self._vv = None
            self._n = 0
        if self._k is not None:
            k = torch.cat([self._k, k], dim=2)  # (B, H, N_past + n, Dh)
            v = torch.cat([self._v, v], dim=2)
        self._k, self._v = k, v
        return k, v

    # --- new cache objects --------------------------------------------------------------------
    def copy(self) -> KVCache:
        """A new cache object with the same keys and values (sharing the buffer: an append to either
        writes past the other's end, or copies first; see the module docstring)."""
        new = KVCache(static=self.static)
        new._k, new._v, new._family = self._k, self._v, self._family
        if self._store is not None:
            new._store, new._vk, new._vv, new._n = self._store, self._vk, self._vv, self._n
            self._store.readers.add(new)
        return new

    def index_select(self, index: Tensor) -> KVCache:
        """Rows ``index`` of the batch, in a new cache (beam search's reorder): one gather into a
        free buffer of the family, one position longer than the cache (room for the next append)."""
        if self._store is None:
            if self._k is None:
                return self.copy()
            return KVCache(self._k.index_select(0, index), self._v.index_select(0, index), static=self.static)
        src_k, src_v, n, rows = self._vk, self._vv, self._n, index.shape[0]
        _, heads, length, dh = src_k.shape
        dst = self._free_storage(src_k, rows * heads * (n + 1) * dh)
        dst.shape(rows, heads, n + 1, dh)
        # (rows·H,) rows of the (R·H, T·Dh) views: row index[r]·H + h holds row r's head h
        flat = (index.to(torch.long).unsqueeze(1) * heads + torch.arange(heads, device=index.device)).reshape(-1)
        for a, b in ((src_k, dst.k), (src_v, dst.v)):
            torch.index_select(a.view(-1, length * dh)[:, : n * dh], 0, flat, out=b.view(-1, (n + 1) * dh)[:, : n * dh])
        dst.filled = n
        new = KVCache(static=self.static)
        new._family = self._family
        new._attach(dst, n)
        return new

    def __repr__(self) -> str:
        k = self.k
        shape = None if k is None else tuple(k.shape)
        return f"KVCache(static={self.static}, k={shape})"
