"""Which verdicts a CPU run can support.

CPU figures are smoke, not performance claims (the design's rule): the ranks share one host's
cores with each other, with gloo's and DeepSpeed's communication threads and with whatever else
runs there, none of which the run controls or records. So the checks that judge timing quality
(how well a mean is known, how throughput scales) record their numbers on CPU and give no
verdict; the checks of what a run holds and does (memory, model states, loss) judge CPU runs as
they judge GPU runs. Measured on this project's 2-core machine with other jobs running, over the
18 default configurations of one session: mean step times known to between +-2.9% and +-300%
(10 steps each), and two ranks delivering 43% to 92% of twice one rank's tokens/s.

Only the default bounds (and those of the ini file, a standing policy for every machine the
project runs on) withhold a verdict. A bound passed on the command line is the user asking for a
verdict on this run: it is applied on any device, and on CPU its message carries `cpu_caveat`.
The between-runs checks (step_time_cv, repeat_spread) judge CPU runs with any bound, and carry
the caveat there too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

CPU_SMOKE = (
    "CPU timings are smoke: the ranks share the host's cores with each other and with other "
    "processes, so timing quality is judged on GPUs only"
)


def cpu_smoke(result: Mapping[str, Any]) -> str | None:
    """The reason a timing verdict is withheld for this run, or None on a GPU."""
    return CPU_SMOKE if result.get("device") != "cuda" else None


CPU_CAVEAT = (
    "CPU timings are smoke: the ranks share the host's cores with each other and with other "
    "processes, so this verdict is about this machine at this moment, not a performance claim"
)


def cpu_caveat(result: Mapping[str, Any], option: str | None = None) -> str:
    """What a timing verdict on a CPU run must say ('' on a GPU): the bound `option` was given on
    the command line (the reason a verdict was given at all), and that CPU timings are smoke."""
    if result.get("device") == "cuda":
        return ""
    why = f"judged on CPU because {option} was given on the command line; " if option else ""
    return f" ({why}{CPU_CAVEAT})"
