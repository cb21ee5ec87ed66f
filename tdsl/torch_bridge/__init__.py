"""The PyTorch bridge's parts (issue 25); ``tdsl.torch`` is its public entry.

`interop` (arrays that are not numpy's, in and out of kernels, without copies) imports no
third-party library; `ops` (``custom_op``) imports torch, and is imported by ``tdsl.torch``
only. ``import tdsl`` imports neither.
"""
