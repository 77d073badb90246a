"""Whether a client socket's connection is up, told by ZeroMQ's socket monitor.

A DEALER socket hides its connection: a peer that dies is reconnected to in the background,
and a request that was on the broken connection simply never gets its reply. A `LinkWatch`
reads the socket's monitor events (handshake done, connection dropped) so that the client
(ipc/connection.py) sends only on a completed connection, and fails the requests in flight
as soon as their connection breaks.

The monitor is a PAIR socket of its own with a ZMQ_FD; like the watched socket it is used only
by the thread that holds the connection's socket lock, and is read to the end whenever it is
read (its descriptor is edge-triggered).
"""
from __future__ import annotations

import zmq
from zmq.utils.monitor import parse_monitor_message

_UP = int(zmq.EVENT_HANDSHAKE_SUCCEEDED)
_DOWN = int(zmq.EVENT_DISCONNECTED)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_NOBLOCK = int(zmq.NOBLOCK)


class LinkWatch:
    """The monitor of one socket; create it before the socket connects, so that the first
    handshake is seen. `up`: a completed connection exists (as far as the events read tell)."""

    def __init__(self, sock: zmq.Socket):
        self._sock = sock
        self._mon = sock.get_monitor_socket(_UP | _DOWN)
        self.fd = self._mon.getsockopt(zmq.FD)
        self.up = False

    def read(self) -> bool:
        """Take every waiting event; True when a completed connection broke since the last
        read (even if a new one is already up)."""
        mon, broke = self._mon, False
        while mon.get(_EVENTS) & _POLLIN:
            event = parse_monitor_message(mon.recv_multipart(_NOBLOCK))["event"]
            if event == _UP:
                self.up = True
            elif event == _DOWN:
                self.up = False
                broke = True
        return broke

    def close(self) -> None:
        """Stop watching; call before the socket is closed."""
        try:
            self._sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self._mon.close(0)
