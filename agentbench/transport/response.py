"""What came back on a connection of :mod:`agentbench.transport.stream`: status, headers
and the body's raw reads with their stamps, turned into stamped pieces of body once the
response is over (the chunk framing removed by :mod:`agentbench.transport.chunked`)."""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate, repeat
from operator import add

from agentbench.transport.chunked import dechunk


class Response:
    """What came back: status, headers (lower-case names), and the body as it arrived:
    ``reads`` (raw socket reads after the head, chunk framing included) and their stamps."""

    __slots__ = ("status", "reason", "headers", "reads", "times", "chunked", "decoded",
                 "end_ns")

    def __init__(self) -> None:
        self.status = 0
        self.reason = ""
        self.headers: dict[str, str] = {}
        self.reads: list[bytes] = []
        self.times: list[int] = []
        self.chunked = False
        #: a complete chunked body: each chunk's data and where it ends in the raw bytes
        self.decoded: tuple[list[bytes], list[int]] | None = None
        #: the stamp of the read that brought the stream's last event when the request
        #: ended there, the body unfinished (``agentbench.transport.streamtimer``)
        self.end_ns: int | None = None

    def body(self, partial: bool = False) -> tuple[list[bytes], list[int]]:
        """The body as pieces with arrival stamps, each stamp the read that brought the
        piece's last byte, so that every byte is stamped with its own read's arrival:
        the reads themselves, or for chunked encoding each chunk's data when every chunk
        came in one read (an engine writes one event per chunk), else the data of each
        read (``partial``: of a body cut short)."""
        if not self.chunked:
            return self.reads, self.times
        if self.decoded is not None:
            datas, ends = self.decoded
            n = len(datas)
            read_ends = list(accumulate(map(len, self.reads)))
            # chunk k (k < n - 1) fills read k exactly; the last starts a read and ends in it
            if n and len(read_ends) >= n and ends[-1] <= read_ends[n - 1] \
                    and read_ends[:n - 1] == list(map(add, ends[:n - 1], repeat(2))):
                return datas, self.times[:n]
            # reads of whole chunks (a client that fell behind reads several at once):
            # each chunk stamped with the read that brought it
            if n and set(read_ends[:-1]).issubset(map(add, ends, repeat(2))):
                at = map(bisect_left, repeat(read_ends), ends)
                return datas, list(map(self.times.__getitem__, at))
        out = dechunk(self.reads, self.times, partial)
        return out if out is not None else ([], [])
