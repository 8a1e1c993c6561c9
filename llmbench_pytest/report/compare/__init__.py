"""`llmbench compare`: inputs.py reads each input and its price, comparison.py lays the
configurations side by side and names the fastest and cheapest only where the decision allows."""

from __future__ import annotations

from .comparison import Comparison, compare
from .inputs import Input, load_inputs, parse_prices

__all__ = ["Comparison", "Input", "compare", "load_inputs", "parse_prices"]
