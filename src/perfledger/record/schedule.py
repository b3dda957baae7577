"""Which steps the profiler records: the options carried to every worker and the schedule.

Standard library only: it runs inside the profiled program.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Final

ENV_OPTIONS: Final = "PERFLEDGER_OPTIONS"

LEVELS: Final = ("light", "default", "full")

# What the profiler does during a step (torch's ProfilerAction, named for the step log).
ACTION_NONE: Final = "none"
ACTION_WARMUP: Final = "warmup"
ACTION_RECORD: Final = "record"
ACTION_SAVE: Final = "save"  # the last step of a chunk: its trace is written when it ends
RECORDED_ACTIONS: Final = (ACTION_RECORD, ACTION_SAVE)
# Interleaved recording: a recorded step, an unprofiled one, a warm-up step, and again.
INTERLEAVE_PERIOD: Final = 3


@dataclass(frozen=True)
class DriverOptions:
    """What to profile: skip the first ``skip`` steps, then record ``steps`` (0: all the rest),
    writing the trace every ``flush_steps`` recorded steps (0: once, when the window ends);
    ``interleave``: each recorded step is followed by an unprofiled one and a warm-up step
    (see :func:`planned_action`).

    Raises:
        ValueError: a negative count or an unknown level.
    """

    skip: int = 1
    steps: int = 10
    level: str = "default"
    flush_steps: int = 1
    interleave: bool = False

    def __post_init__(self) -> None:
        if self.skip < 0:
            raise ValueError(f"--skip must be >= 0 (got {self.skip})")
        if self.steps < 0:
            raise ValueError(f"--steps must be >= 0, 0 for all (got {self.steps})")
        if self.flush_steps < 0:
            raise ValueError(f"--flush-steps must be >= 0, 0 for once (got {self.flush_steps})")
        if self.level not in LEVELS:
            raise ValueError(f"level must be one of {', '.join(LEVELS)} (got {self.level!r})")

    def to_json(self) -> str:
        """The options as the JSON carried by the environment to every worker."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DriverOptions:
        """Options read back from :meth:`to_json`; ValueError when malformed."""
        try:
            fields = json.loads(text)
            return cls(
                skip=int(fields["skip"]),
                steps=int(fields["steps"]),
                level=fields["level"],
                flush_steps=int(fields.get("flush_steps", 0)),
                interleave=bool(fields.get("interleave", False)),
            )
        except (TypeError, KeyError, json.JSONDecodeError) as error:
            raise ValueError(f"malformed {ENV_OPTIONS}: {text!r}") from error


def planned_action(
    step: int, skip: int, steps: int, flush_steps: int = 0, *, interleave: bool = False
) -> str:
    """What the profiler does during ``step`` (0-based) with ``--skip skip --steps steps``.

    The last skipped step warms the profiler up, so that the first recorded step does not pay
    for the profiler's start; ``steps == 0`` records every step after the skipped ones. The
    trace is saved after every ``flush_steps``-th recorded step (0: never before the window's
    last) and after the window's last.

    ``interleave``: the recorded steps are ``skip``, ``skip + 3``, ``skip + 6`` ...; each is
    saved (a profiling cycle of its own), followed by an unprofiled step (the like-with-like
    comparison of the profiler's overhead: the same program a step later, under the same
    conditions) and a warm-up step for the next one.
    """
    if step < skip - 1:
        return ACTION_NONE
    if step == skip - 1:
        return ACTION_WARMUP
    if interleave:
        cycle, position = divmod(step - skip, INTERLEAVE_PERIOD)
        if steps and cycle >= steps:
            return ACTION_NONE
        if position == 0:
            return ACTION_SAVE
        if position == INTERLEAVE_PERIOD - 1 and (not steps or cycle + 1 < steps):
            return ACTION_WARMUP
        return ACTION_NONE
    last = skip + steps - 1
    if steps and step > last:
        return ACTION_NONE
    if step == last or (flush_steps and (step - skip + 1) % flush_steps == 0):
        return ACTION_SAVE
    return ACTION_RECORD


def window_ends(step: int, skip: int, steps: int, *, interleave: bool = False) -> bool:
    """Whether ``step`` is the last recorded one: the profiler is stopped for good after it."""
    if interleave:
        return steps > 0 and step == skip + INTERLEAVE_PERIOD * (steps - 1)
    return steps > 0 and step == skip + steps - 1
