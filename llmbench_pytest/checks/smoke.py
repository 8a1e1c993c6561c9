"""Which verdicts a CPU run can support.

CPU figures are smoke, not performance claims (the design's rule): the ranks share one host's
cores with each other, with gloo's and DeepSpeed's communication threads and with whatever else
runs there, none of which the run controls or records. So the checks that judge timing quality
(how well a mean is known, how throughput scales) record their numbers on CPU and give no
verdict; the checks of what a run holds and does (memory, model states, loss) judge CPU runs as
they judge GPU runs. Measured on this project's 2-core machine with other jobs running, over the
18 default configurations of one session: mean step times known to between +-2.9% and +-300%
(10 steps each), and two ranks delivering 43% to 92% of twice one rank's tokens/s.
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
