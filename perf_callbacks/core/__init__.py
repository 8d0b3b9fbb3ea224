"""The framework-free core: one ``PerfEngine`` per run and rank, built from the families below it.

From the top: ``engine`` (the run) on ``hang`` and ``windows`` (profiling windows), ``triggers`` (when a window opens),
``timing``, ``memory``, ``ranges`` (NVTX, Nsight Systems), ``flops`` and ``files``, on a small base of modules here
(the run context, warnings, the step clock, phase spans, how the process ends, module paths). ``tools/imports.py``
checks that imports only run down this list.
"""
