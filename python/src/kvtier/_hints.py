"""Session hints as engines carry them per request (``docs/store.md``, "Session hints").

An engine adapter reads a ``"kvtier"`` object from the request's metadata (vLLM's
``kv_transfer_params``, or an action of its ``kv_hints`` envelope; LMCache's request
configuration as ``lmcache.kvtier.<field>`` entries) and sends it to kvtierd once the request's
blocks are stored::

    {"session": "conversation-42",  # or a non-zero integer below 2**64
     "retain_s": 30,                # the agent's tool call typically takes 15 s
     "priority": "high",            # "low" | "normal" | "high"
     "finished": false}             # true on the session's last request only

Every field is optional but ``session``. A malformed object is logged and ignored: a hint
never fails a request.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any, cast, get_args

from ._client import SessionPriority

log = logging.getLogger("kvtier")

#: The action type of a ``kvtier`` hint in vLLM's ``KvHintsEnvelope``.
KV_HINT_ACTION = "kvtier.session"


def session_id(session: str | int) -> int:
    """The kvtier session id of ``session``: an integer as it is (non-zero, below 2**64), any
    other name the first 8 bytes of its SHA-256 (never 0). Put blocks with it and hint it."""
    if isinstance(session, int) and not isinstance(session, bool):
        if not 0 < session < 2**64:
            raise ValueError(f"session {session} is not in [1, 2**64)")
        return session
    if not isinstance(session, str) or not session:
        raise ValueError(f"session {session!r} is neither a non-empty string nor an integer")
    digest = hashlib.sha256(b"kvtier/session/v1" + session.encode()).digest()
    return int.from_bytes(digest[:8], "little") or 1


@dataclass(frozen=True)
class SessionHint:
    """One request's ``kvtier`` object, checked."""

    session: int
    retain_s: int = 0
    priority: SessionPriority | None = None
    finished: bool = False

    @staticmethod
    def parse(raw: Any) -> SessionHint | None:
        """The hint of a ``kvtier`` object; None (logged) when it is malformed."""
        try:
            if not isinstance(raw, dict):
                raise ValueError("it is not an object")
            unknown = set(raw) - {"session", "retain_s", "priority", "finished"}
            if unknown:
                raise ValueError(f"unknown fields {sorted(unknown)}")
            retain = raw.get("retain_s", 0)
            if not isinstance(retain, int) or isinstance(retain, bool) or retain < 0:
                raise ValueError(f"retain_s {retain!r} is not whole seconds")
            priority = raw.get("priority")
            if priority is not None and priority not in get_args(SessionPriority):
                raise ValueError(f"priority {priority!r} is not one of {get_args(SessionPriority)}")
            finished = raw.get("finished", False)
            if not isinstance(finished, bool):
                raise ValueError(f"finished {finished!r} is not a boolean")
            level = cast("SessionPriority | None", priority)
            return SessionHint(session_id(raw.get("session", "")), retain, level, finished)
        except ValueError as e:
            log.warning("kvtier: ignoring the request's kvtier hint %r: %s", raw, e)
            return None

    @property
    def says_something(self) -> bool:
        return bool(self.retain_s or self.priority or self.finished)


def from_vllm(kv_transfer_params: Any, kv_hints: Any) -> SessionHint | None:
    """The hint of a vLLM request: ``kv_transfer_params["kvtier"]``, else the payload of the
    last ``kvtier.session`` action of its ``kv_hints`` envelope."""
    if isinstance(kv_transfer_params, dict) and "kvtier" in kv_transfer_params:
        return SessionHint.parse(kv_transfer_params["kvtier"])
    for action in reversed(getattr(kv_hints, "actions", None) or []):
        if getattr(action, "action_type", None) == KV_HINT_ACTION:
            return SessionHint.parse(getattr(action, "payload", None))
    return None


def from_lmcache(request_configs: Any) -> SessionHint | None:
    """The hint of an LMCache request: the ``lmcache.kvtier.*`` entries of its request
    configuration (vLLM's ``kv_transfer_params``), which LMCache keeps on each chunk's key
    without making them part of its identity."""
    if not isinstance(request_configs, dict):
        return None
    prefix = "lmcache.kvtier."
    raw = {k[len(prefix) :]: v for k, v in request_configs.items() if k.startswith(prefix)}
    return SessionHint.parse(raw) if raw else None
