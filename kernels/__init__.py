"""Reference kernel stack for gpu-bisect's demo: a tiny GEMM whose per-shape SIMT/MMA dispatch table can make
speculative decoding batch-variant, a decoder that measures it, and a history generator that plants it.

Modules the core imports (``tiny_gemm``'s table and dispatcher, ``trace``, ``demo``) never import torch or
triton at module level; the numeric ones need the ``kernels`` extra. See docs/kernels.md.
"""
