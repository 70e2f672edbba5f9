"""Stand-in for flash-attn (CUDA kernels), for OpenRLHF's ``serve_rm`` on a machine without GPUs.

``openrlhf.models`` imports ``ring_attn_utils``, which imports flash-attn's padding helpers at module level; the
reward model served with ``--ds.attn_implementation eager`` and without ``--ds.packing_samples`` calls none of them.
"""
