"""The machine a measurement ran on, in one line: recorded beside every benchmark and quality result."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def machine_summary() -> str:
    """Architecture, CPU model and its int8 instruction set (int8 speed ratios depend on it), cores, Python."""
    return (
        f"{platform.machine()}, {cpu_model()}, {int8_instructions()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}"
    )


def cpu_model() -> str:
    return _cpuinfo().get("model name", platform.processor() or "unknown CPU")


def int8_instructions() -> str:
    """The widest int8 dot-product instructions the CPU has (onnxruntime's int8 kernels use them)."""
    flags = set(_cpuinfo().get("flags", "").split())
    for flag, name in (("avx512_vnni", "int8 AVX512-VNNI"), ("avx_vnni", "int8 AVX-VNNI"), ("avx2", "int8 AVX2")):
        if flag in flags:
            return name
    return "no x86 int8 dot products known"


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty where there is none)."""
    path = Path("/proc/cpuinfo")
    if not path.is_file():
        return {}
    fields: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields
