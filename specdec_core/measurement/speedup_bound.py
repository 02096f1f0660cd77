"""A lossless method's speedup is bounded by its τ, so a measured one above τ is a disturbance.

Every speculative step costs at least one target forward, which costs at least one
autoregressive step, and yields τ tokens on average; so tokens/s against autoregressive
decoding cannot exceed τ. A measured ratio above τ says the two timings ran under different
conditions (another job took the CPU during the reference, a cold cache, a frequency change):
it is shown as a timing disturbance with that reason, never as a result. Lossy policies accept
tokens the target would not have produced at this rate and are outside the rule.
"""

from __future__ import annotations

from dataclasses import dataclass

WHY = (
    "above τ, which a lossless method cannot reach (every step costs at least one target "
    "forward): the run and its reference were timed under different load; run again"
)


@dataclass(frozen=True)
class MeasuredSpeedup:
    """A run's tokens/s over its reference's, with the τ that bounds it."""

    ratio: float
    tau: float
    lossy: bool = False

    @property
    def disturbed(self) -> bool:
        """Above τ for a lossless method: a timing disturbance, not a speedup."""
        return not self.lossy and self.tau > 0 and self.ratio > self.tau

    def label(self) -> str:
        """'1.62×', or 'timing disturbed' for a ratio above τ."""
        return "timing disturbed" if self.disturbed else f"{self.ratio:.2f}×"

    def why(self) -> str:
        """The one-line reason a disturbed ratio is not shown ('' when it is plausible)."""
        if not self.disturbed:
            return ""
        return f"×{self.ratio:.2f} vs autoregressive is {WHY}"
