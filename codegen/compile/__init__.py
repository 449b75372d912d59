"""Generated sources to an importable module, one concern a module, each importing only
those listed before it: the build cache (cache), the CPU (cpu), the BLAS and the CUDA
toolkit (blas, cuda_toolkit), the host compiler's flags (flags), what every key holds
besides them (environment), running the compiler (commands) and ending it (process_tree), the runtime compiled once
per cache (runtime), the toolchains (toolchain), one extension's build (extension), the
emitted CMakeLists.txt (cmake); and what a build is asked for (options) with the index
that answers a build seen before without importing the compiler (index). docs/build.md."""
