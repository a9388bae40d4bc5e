"""Your own GPUs: detect them (doctor), explain an out-of-memory message, benchmark them (calibrate)
and run a scenario on them (measure). Torch and NVML are imported lazily, only where needed."""
from .detect import GpuLink, LocalGpu, LocalSystem, detect, match_catalog, no_gpu_message
from .oom import Knob, OomExplanation, OomReport, explain_oom, parse_oom

__all__ = ["GpuLink", "Knob", "LocalGpu", "LocalSystem", "OomExplanation", "OomReport", "detect", "explain_oom",
           "match_catalog", "no_gpu_message", "parse_oom"]
