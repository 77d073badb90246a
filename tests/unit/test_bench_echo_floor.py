"""The pipeline benchmark's transport floor (benchmarks/_echo_floor): a real echo process
answers one request at a time with a put reply's size, every round trip is timed, and the
server process ends when the context closes."""
import os
import sys

import zmq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))

from _echo_floor import REPLY_BYTES, EchoServer, echo_worker  # noqa: E402


def test_the_echo_answers_each_request_with_a_reply_of_a_put_replys_size():
    with EchoServer() as echo:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, 10_000)
        sock.connect(echo.address)
        try:
            for size in (0, 100, 1024):
                sock.send_multipart([b"envelope", b"x" * size])
                assert sock.recv_multipart() == [b"r" * REPLY_BYTES]
        finally:
            sock.close()


def test_every_round_trip_of_the_run_is_timed_and_the_server_ends_with_the_context():
    with EchoServer() as echo:
        r = echo_worker(echo.address, 1024, 0.3)
        proc = echo._proc
    assert r["round_trips"] == len(r["latencies"]) > 10
    assert all(0 < x < 1.0 for x in r["latencies"])
    assert sum(r["latencies"]) <= 0.3 + max(r["latencies"])     # only the timed window counts
    assert not proc.is_alive() and proc.exitcode == 0


def test_a_window_keeps_that_many_requests_in_flight_and_every_one_is_answered_and_timed():
    with EchoServer() as echo:
        r = echo_worker(echo.address, 1024, 0.3, window=8)
    lat = r["latencies"]
    assert r["round_trips"] == len(lat) > 10 and all(0 < x < 5.0 for x in lat)
    # With 8 in flight the requests overlap: their times add up to more than the run lasted.
    assert sum(lat) > 0.3 + max(lat)
