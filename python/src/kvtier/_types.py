"""Plain values returned by kvtier calls."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Tier(enum.IntEnum):
    """Where a block was found: the tiers of the memory hierarchy kvtier manages."""

    G2 = 2  #: host DRAM on this node
    G3 = 3  #: local NVMe on this node
    G4 = 4  #: storage shared by the cluster


@dataclass(frozen=True)
class PrefixMatch:
    """How many leading keys of a prompt are stored, and in which tier each one is."""

    num_blocks: int
    tiers: list[Tier] = field(default_factory=list)


class Role(enum.IntEnum):
    """What a block holds, for kvtierd's eviction order (``docs/state.md``)."""

    KV = 0  #: KV of a model that can resume after any block (full attention only)
    #: KV of a model that resumes only where its state values are (hybrid, sliding window):
    #: with no later block and no state after it, it serves no resume and is evicted first
    KV_NEEDS_STATE = 1
    #: a state value (:func:`kvtier.state_key`), whose parent is the block it belongs to
    STATE = 2


@dataclass(frozen=True)
class StateGroup:
    """A family of state values that hang off a prompt's blocks, and which of them a resume
    after block ``i`` needs: ``window_blocks`` 0, the value of every block up to ``i`` (a
    per-token cache such as a sparse-attention indexer's); ``w >= 1``, those of the last ``w``
    blocks (a sliding window of ``w`` blocks; 1: a recurrent or linear-attention state at the
    boundary)."""

    name: str
    window_blocks: int = 1


@dataclass(frozen=True)
class ResumeMatch:
    """The answer of :meth:`kvtier.Client.lookup_resume`.

    ``kv_blocks``: leading blocks whose keys are all stored. ``resume_blocks``: the longest
    prefix the engine can resume from (its KV and every group's values present); 0 for none.
    ``resumable``: with ``all_lengths``, every such length, ascending. ``group_blocks``: per
    group, the longest prefix that group alone allows. ``tiers``: where each key of the first
    ``kv_blocks`` blocks was found.
    """

    kv_blocks: int
    resume_blocks: int
    tiers: list[Tier] = field(default_factory=list)
    resumable: list[int] = field(default_factory=list)
    group_blocks: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class DeletionReport:
    """Copies a deletion by session or tenant removed, per tier."""

    memory_blocks: int
    disk_blocks: int
    shared_blocks: int


@dataclass(frozen=True)
class ServerInfo:
    """What kvtierd said when the client connected."""

    server: str
    tenant: str
    features: int
    max_frame_bytes: int
    max_block_bytes: int
    max_batch: int
