"""The remote plane's I/O (docs/remote.md): the gateway, its proxies, its files, its NATS link.

Imported only by ``pi-cross-session gateway`` and ``remote``; needs the ``[remote]`` extra.
"""
