"""A streaming request's one timer (``stream.Conn.arm``): the deadline, the stall timeout,
and the end of a stream at its last event while its body goes on.

A stream's last event (``data: [DONE]``, ``response.completed``, ``message_stop``) ends the
request even when the body does not end after it: a server may keep the connection open,
or send ``: ping`` comments, after its answer is whole (OpenAI's own client stops reading
there). No read pays for this: the request's timer also fires every ``END_GRACE_S`` and
looks in the reads since it last did for the bytes of the API's last event
(``agentbench.transport.apis.END_MARKS``, found by :mod:`agentbench.transport.endmarks`
however reads and chunks cut them); ``END_GRACE_S`` after the read that brought
them, if the body has not ended, the stream is read as it stands, and if its last event
came the request ends there, a success stamped at that event's read, its connection
closed (docs/reliability.md). A stall or the deadline reads the stream the same way before
it fails the request.

The connection (``stream.Conn``) says whether a 200 body is being read; what is here
runs only then."""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from itertools import accumulate
from typing import TYPE_CHECKING

from agentbench.transport import apis, endmarks
from agentbench.transport.response import Response

if TYPE_CHECKING:
    from agentbench.transport.stream import Conn

perf_ns = time.perf_counter_ns

#: seconds a body may go on after the read that brought the bytes of the stream's last event
#: before the stream is read to see whether that event came, and how often a request's
#: timer looks for those bytes: a server that ends well sends the body's last chunk with
#: the event or at once after it (its connection is kept), and the bytes may also be a
#: token's text (then the request goes on)
END_GRACE_S = 0.5


def end_due(conn: Conn, resp: Response) -> float | None:
    """Seconds until the stream is read for its last event (0 or less: now), after a
    look in the reads since the last for its bytes; None while none came."""
    reads, looked, tail = resp.reads, conn.looked, conn.tail
    if len(reads) > looked:
        new = reads[looked:]
        seen = tail + b"".join(new)
        at = endmarks.mark_end(seen, conn.api, resp.chunked, len(tail))
        if conn.again:  # the rest of the event that had those bytes: the newest read
            at, conn.again = len(seen), False
        if at > len(tail):  # in the new reads: stamped with the one with their end
            ends = list(accumulate(map(len, new)))
            i = min(bisect_left(ends, at - len(tail)), len(new) - 1)
            conn.marked = conn.t0 + resp.times[looked + i]
        conn.looked = len(reads)
        conn.tail = seen[-endmarks.TAIL:]
    if not conn.marked:
        return None
    return END_GRACE_S - (perf_ns() - conn.marked) / 1e9


def ended_at_last_event(conn: Conn, resp: Response) -> bool:
    """Whether the stream, read as it stands, ended with its last event though the body
    goes on: then the request is over, a success (or a Responses ``response.failed``)
    stamped at that event's read (``Response.end_ns``), and the connection, whose
    response never finished, is not used again."""
    conn.settled = len(resp.reads)  # read as it stands: a quiet spell reads it no more
    pieces, stamps = resp.body(partial=True)
    try:
        st = apis.read_stream(conn.api, pieces, stamps)
    except Exception:  # noqa: BLE001 - unreadable here: finish_record names what
        return False
    if st.end_ns is None:
        conn.again = endmarks.in_unfinished_event(pieces, conn.api)
        return False
    resp.end_ns = st.end_ns
    conn.keep = False
    conn._finish()
    return True


def settled(conn: Conn) -> bool:
    """Whether a stream quiet for ``END_GRACE_S`` is to be read as it stands: the reads
    since it was last read so hold ``error`` (an error event's bytes, in each API's
    shape), then the request ends there if its last event came. A server that says why
    in an error event and then neither ends the body nor closes held the request and its
    lane for the stall timeout (120 s by default). Its bytes are not looked for in every
    look (that made every stream's looks about half again as costly:
    ``benchmarks/stream_bench.py``), nor is a quiet stream read whole each time (a slow
    stream, tokens over half a second apart, would be read once a token): only the reads
    since the last quiet spell are searched, once each."""
    resp = conn.resp
    if resp is None or len(resp.reads) == conn.settled:
        return False
    new = b"".join(resp.reads[max(0, conn.settled - 1):])  # a word cut between two reads
    conn.settled = len(resp.reads)
    return b"error" in (endmarks.unframed(new) if resp.chunked else new)


def arm(conn: Conn, sock_read: float | None, deadline: float | None, total: float | None
        ) -> Timer:
    """One timer for the exchange: fires at the deadline, when no byte came for
    ``sock_read`` s, and every ``END_GRACE_S`` (a request over sooner never sees it
    fire) to look for the bytes of the stream's last event (``end_due``), re-arming
    itself from the last read's stamp (a timer per read would cost more than the read).
    The stream is read for its last event ``END_GRACE_S`` after those bytes, and before
    a stall or the deadline fails the request (``ended_at_last_event``)."""
    loop = asyncio.get_running_loop()
    handle: list[asyncio.TimerHandle] = []

    def check() -> None:
        if conn.done is None or conn.done.done():
            return
        now = loop.time()
        over = deadline is not None and now >= deadline
        quiet = (perf_ns() - conn.last_ns) / 1e9
        stalled = sock_read is not None and 0 < sock_read <= quiet
        left = conn._end_due()
        if (over or stalled or (left is not None and left <= 0)
                or quiet >= END_GRACE_S and settled(conn)) and conn._ended_at_last_event():
            return
        if left is not None and left <= 0:  # those bytes ended nothing (a token's text)
            conn.marked, left = 0, None
        if over:
            conn._fail("timeout", f"request took longer than {total} s")
            return
        due = deadline if deadline is not None else now + 3600.0
        if sock_read:
            if stalled:
                conn._fail("stall_timeout", f"no data for {sock_read} s (Timeout on "
                           "reading data from socket)")
                return
            due = min(due, now + sock_read - quiet)
        due = min(due, now + (END_GRACE_S if left is None else left))
        handle[:] = [loop.call_at(due, check)]

    first = loop.time() + min(sock_read or END_GRACE_S, END_GRACE_S)
    handle.append(loop.call_at(first if deadline is None else min(first, deadline), check))
    return Timer(handle)


class Timer:
    """The current handle of a self re-arming timer."""

    __slots__ = ("handle",)

    def __init__(self, handle: list[asyncio.TimerHandle]) -> None:
        self.handle = handle

    def cancel(self) -> None:
        for h in self.handle:
            h.cancel()
