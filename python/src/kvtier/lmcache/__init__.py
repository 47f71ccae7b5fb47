"""LMCache on kvtier (tested with lmcache 0.5.6; supported: 0.5.6 to 0.5.x).

Three ways, none of which patches LMCache:

- **MP mode, no code:** ``lmcache server --l2-adapter '{"type": "resp", "host": ..., "port":
  <kvtierd's RESP port>, "username": <tenant>, "password": <token>}'``. kvtierd answers
  LMCache's RESP client byte for byte.
- **MP mode, native** (:class:`NativeConnector`): ``lmcache server --l2-adapter
  '{"type": "native_plugin", "module_path": "kvtier.lmcache", "class_name": "NativeConnector",
  "adapter_params": {"url": "unix:///path/kvtierd.sock", "token": ...}}'``. Over kvtierd's
  Unix socket the chunks move through shared memory; over ``tcp://`` or ``tls://`` through the
  native protocol.
- **In-process mode** (:mod:`kvtier.lmcache.remote`): a ``remote_storage_plugins`` connector
  for ``kvtier://`` URLs.

LMCache's key strings (model, KV rank, chunk hash, salt) become kvtier keys as RESP keys do
(:func:`kvtier.named_key`), in the tenant of the token: the ``resp`` and ``native_plugin``
adapters share one cache, and two LMCache deployments with different tokens never see each
other's chunks. The adapters translate only; placement, eviction and tenants stay in kvtierd.
"""

from __future__ import annotations

from .. import _kvtier


class NativeConnector(_kvtier.LMCacheConnector):
    """LMCache's ``native_plugin`` L2 connector over kvtierd.

    ``url``: ``unix:///path/kvtierd.sock`` (shared memory unless ``shared_memory`` is false),
    ``tcp://host:port`` or ``tls://host:port``. ``token`` (and ``tenant``) select the tenant.
    ``num_workers`` threads, each with its own connection, run the operations without the GIL.
    A get reports a chunk loaded only when kvtierd holds it with exactly the buffer's size.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        tenant: str | None = None,
        num_workers: int = 4,
        shared_memory: bool = True,
    ) -> None:
        super().__init__(url, token or "", tenant or "", num_workers, shared_memory)


__all__ = ["NativeConnector"]
