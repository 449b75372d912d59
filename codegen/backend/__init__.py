"""The native backend: lowering the IR to views, fused loops and kernel calls, a memory
plan, and C++ (later CUDA) text. C++ and CUDA differ by a `Dialect`, not by copies."""
