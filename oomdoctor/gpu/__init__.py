"""GPU state: the snapshot model, its loaders, the NVML reader and co-tenant reasoning.

Only ``oomdoctor.gpu.nvml`` imports pynvml, and only when a live snapshot is asked for.
"""
