"""The asyncio clients, on `zmq.asyncio`: `Producer`, `Consumer`, `Admin` with the arguments,
results and errors of the blocking ones (docs/CLIENTS.md), sharing their protocol logic."""
from ipc.aio.admin import Admin
from ipc.aio.connection import AsyncConnection
from ipc.aio.consumer import Consumer
from ipc.aio.producer import Producer

__all__ = ["Admin", "AsyncConnection", "Consumer", "Producer"]
