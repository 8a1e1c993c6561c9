"""Runs inside each rank: what the GPU did during the measured steps, from NVML.

A background thread samples this rank's GPU every 100 ms through nvidia-ml-py (no nvidia-smi
processes): utilisation, memory used, power, SM clock, temperature and the clock-event
(throttle) reasons. The reasons that mean the GPU slowed itself down (power cap, thermal, hardware
slowdown, power brake) mark the run as throttled. Without nvidia-ml-py or NVML the monitor stays
off and the result says so.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

import torch

from ..config.nvml import close_nvml, open_nvml

# NVML clock-event reason bits (nvml.h, nvmlClocksEventReason*)
REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THROTTLING = {
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
}


def _handle(nvml: Any, device: torch.device) -> Any:
    """The NVML handle of this torch device, matched by PCI bus id (CUDA_VISIBLE_DEVICES-proof)."""
    props = torch.cuda.get_device_properties(device)
    bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    return nvml.nvmlDeviceGetHandleByPciBusId(bus)


class GpuMonitor:
    def __init__(self, device: torch.device, interval_s: float = 0.1) -> None:
        self.device = device
        self.interval_s = interval_s
        self.samples: list[dict[str, float | int]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None
        self._h: Any = None

    def start(self) -> None:
        if self.device.type != "cuda":
            self.error = "no GPU"
            return
        try:
            self._nvml = open_nvml()
            self._h = _handle(self._nvml, self.device)
        except Exception as exc:  # NvmlUnavailable, NVMLError: the run goes on without it
            self.error = f"NVML unavailable ({exc})"
            return
        self._thread = threading.Thread(target=self._run, name="llmbench-nvml", daemon=True)
        self._thread.start()

    def _sample(self) -> dict[str, float | int]:
        n, h = self._nvml, self._h
        util = n.nvmlDeviceGetUtilizationRates(h)
        reasons_fn = (
            getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or n.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        return {
            "t": time.monotonic(),
            "util": util.gpu,
            "mem_used": n.nvmlDeviceGetMemoryInfo(h).used,
            "power_mw": n.nvmlDeviceGetPowerUsage(h),
            "sm_mhz": n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
            "temp_c": n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
            "reasons": reasons_fn(h),
        }

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self._sample())
            except Exception as exc:
                self.error = f"NVML sampling failed: {exc}"
                return
            self._stop.wait(self.interval_s)

    def stop(self) -> dict[str, Any] | None:
        """The window's summary, or None when the monitor could not run (see .error)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
        if self._nvml is not None:
            close_nvml(self._nvml)
        if not self.samples:
            return None
        s = self.samples
        seen: dict[str, float] = {}
        for bit, name in REASONS.items():
            count = sum(1 for x in s if int(x["reasons"]) & bit)
            if count and name != "gpu_idle":
                seen[name] = count / len(s)
        return {
            "samples": len(s),
            "interval_sec": self.interval_s,
            "util_pct_mean": statistics.fmean(x["util"] for x in s),
            "util_pct_min": min(x["util"] for x in s),
            "memory_used_gb_max": max(x["mem_used"] for x in s) / 1e9,
            "power_w_mean": statistics.fmean(x["power_mw"] for x in s) / 1000,
            "power_w_max": max(x["power_mw"] for x in s) / 1000,
            "sm_clock_mhz_mean": statistics.fmean(x["sm_mhz"] for x in s),
            "sm_clock_mhz_min": min(x["sm_mhz"] for x in s),
            "temperature_c_max": max(x["temp_c"] for x in s),
            "clock_event_reasons": seen,
            "throttled": any(name in THROTTLING for name in seen),
        }
