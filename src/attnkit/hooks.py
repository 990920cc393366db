"""Forward hooks scoped to one call and one thread.

A hook registered on a module that several threads share sees every forward pass of that module, the
passes other threads run at the same moment included: ``attnkit serve`` answers light requests in two
threads over one model, and a hook of one request would read (or ablate) the other request's tensors. The
hooks of a :func:`thread_hooks` block act only on the passes of the thread that opened it; on any other
thread's pass they return ``None`` (the module's output or input unchanged). They are removed as the block
ends, however it ends, so the model keeps no state: TransformerLens's hook points, scoped to one call.
(:mod:`attnkit.hf.capture` scopes its own hooks the same way, through ``transformers``' attention interface.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from torch import nn

__all__ = ["thread_hooks"]


@contextmanager
def thread_hooks(
    hooks: Iterable[tuple[nn.Module, Callable]], *, pre: bool = False, with_kwargs: bool = False
) -> Iterator[None]:
    """Within the block, each ``(module, hook)`` of ``hooks`` is a forward hook of ``module`` (a forward
    pre-hook when ``pre``; ``with_kwargs`` as :meth:`torch.nn.Module.register_forward_hook` takes it) called
    on this thread's passes only; all are removed in ``finally``."""
    me = threading.get_ident()

    def mine(hook: Callable) -> Callable:
        def scoped(*args):
            return hook(*args) if threading.get_ident() == me else None

        return scoped

    handles = []
    try:
        for module, hook in hooks:
            register = module.register_forward_pre_hook if pre else module.register_forward_hook
            handles.append(register(mine(hook), with_kwargs=with_kwargs))
        yield
    finally:
        for handle in handles:
            handle.remove()
