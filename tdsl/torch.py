"""tdsl inside PyTorch programs (the ``tdsl[torch]`` extra; docs/torch.md).

    import tdsl, tdsl.torch
    softmax = tdsl.torch.custom_op(tdsl.stdlib["softmax"], name="mylib::softmax")
    y = torch.compile(lambda x: softmax(x) * 2)(torch.randn(8, 16))

- `custom_op` registers a tdsl op with ``torch.library``: a schema, a CPU kernel, a fake
  implementation from tdsl's shape rules (``torch.compile`` without a graph break,
  ``torch.export``) and an optional backward (`tdsl.torch_bridge.ops`).
- Kernels and graph modules take PyTorch tensors anyway, with or without this module:
  a tensor in gives a tensor out, no copy (`tdsl.torch_bridge.interop`).
- Importing this module makes tdsl's host kernels run on the OpenMP runtime PyTorch
  loaded, with ``torch.get_num_threads()`` threads unless ``OMP_NUM_THREADS`` says
  otherwise (`tdsl.emit_c.omp`): one thread pool in the process.

``import tdsl`` never imports torch; this module does.
"""
from __future__ import annotations

import torch as _torch

from .emit_c import omp as _omp
from .torch_bridge.ops import custom_op

_omp.use_torch(_torch)

__all__ = ["custom_op"]
