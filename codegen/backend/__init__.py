"""The native backend: lowering the IR to views, fused loops and kernel calls, a memory
plan, and C++ or CUDA text. The two differ by their `Target` (target.py), not by copies."""
