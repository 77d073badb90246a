"""mqstore's wire protocol, socket helpers, shared-memory control block and the client library:
`from ipc import Producer, Consumer, Admin` (docs/PROTOCOL.md is the contract they speak;
docs/CLIENTS.md their knobs), and the asyncio ones: `from ipc import aio`.

The client classes are imported on first use, so that services importing `ipc.protocol` or
`ipc.control_block` do not load them.
"""
_EXPORTS = {
    "Producer": "ipc.producer", "SendResult": "ipc.send_result",
    "Consumer": "ipc.consumer",
    "Admin": "ipc.admin",
    "Connection": "ipc.connection", "MQError": "ipc.connection", "ConnectionClosed": "ipc.connection",
    "PeerUnreachable": "ipc.connection", "ConnectionLost": "ipc.connection",
    "ReceivedMessage": "ipc.received",
}


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ipc' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = sorted(_EXPORTS)
