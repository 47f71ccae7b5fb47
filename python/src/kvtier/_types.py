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
