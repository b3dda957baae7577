"""The step graph's codes: node kinds, the classes a node's time is spent on, and the
constants its construction reads (:mod:`perfledger.analysis.graph`)."""

from __future__ import annotations

from typing import Final

import numpy as np

from perfledger.analysis import opclass

# Node kinds.
HOST_OP: Final = 0  # an outermost host slice of a host-only run
LAUNCH: Final = 1  # a host call that issued a device task
SYNC_CALL: Final = 2  # a synchronisation call where the host reaches it
SYNC_WAIT: Final = 3  # the end of its wait, after the tasks it waited for
TASK: Final = 4  # a device task

# What a node's time, or the delay of the edge that started it, is spent on (``bound_by``).
HOST: Final = "host"
DATALOADER: Final = "dataloader"
LAUNCH_OVERHEAD: Final = "launch"
SYNC: Final = "sync"
COMMUNICATION: Final = "communication"
COPIES: Final = "copies"
OTHER: Final = "other"
COMPUTE_CLASSES: Final = tuple(
    c
    for c in opclass.OP_CLASSES
    if c not in (opclass.COMMUNICATION, opclass.MEMCPY, opclass.MEMSET)
)
# COMMUNICATION's wait for peers and its transfer are parts of it, not classes of their own:
# ``bound_by_parts`` beside ``bound_by`` (perfledger.model.whatif.communication_parts).
CLASSES: Final = (
    HOST,
    DATALOADER,
    LAUNCH_OVERHEAD,
    SYNC,
    COMMUNICATION,
    COPIES,
    OTHER,
    *(f"compute:{c}" for c in COMPUTE_CLASSES),
)
CLASS_CODE: Final = {name: code for code, name in enumerate(CLASSES)}

# A task that starts within this of its stream predecessor's end was queued behind it.
QUEUED_GAP_NS: Final = 2_000
# A synchronisation call waited for a task that ended at most this after the call returned
# (clock jitter between the host and the device).
SYNC_END_TOLERANCE_NS: Final = 1_000
# No earliest start: the node starts when its predecessors let it.
FREE: Final = np.iinfo(np.int64).min // 4
