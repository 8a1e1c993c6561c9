"""What a check returns: passed (True, False, or None with the reason), the numbers, the message."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class CheckOutcome:
    name: str
    passed: bool | None
    message: str
    measured: float | None = None
    limit: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
