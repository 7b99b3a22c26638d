"""Errors that reach the user as one line naming what and where."""

from __future__ import annotations


def printable(text: str) -> str:
    """``text`` with each character that is not printable (a line break, a tab, an escape
    sequence's ESC, U+2028) written as its Python escape: text from a trace file or its
    name reaches the terminal as one line that cannot retitle, recolour or clear it."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def os_reason(e: BaseException) -> str:
    """An OSError's reason as the system words it (``No space left on device``), also for
    pyarrow's, whose text is ``[Errno 28] Error writing bytes to file. Detail: ...``."""
    import os

    errno = getattr(e, "errno", None)
    return os.strerror(errno) if isinstance(errno, int) and errno else str(e)


class InputError(Exception):
    """Bad user input (trace file, scenario, argument): printed as one line, exit code 2.

    ``source`` names the file (or dataset), ``where`` the record, line or key path inside
    it, ``field`` the offending field. Any of them may be empty.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        where: str | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.source = source
        self.where = where
        self.field = field
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = [p for p in (self.source, self.where) if p]
        loc = ":".join(parts)
        fld = f"field '{self.field}': " if self.field else ""
        return f"{loc}: {fld}{self.message}" if loc else f"{fld}{self.message}"

    def located(self, *, source: str | None = None, where: str | None = None) -> InputError:
        """The same error with a file or record filled in where it was not known yet."""
        return InputError(
            self.message,
            source=self.source or source,
            where=self.where or where,
            field=self.field,
        )


class ResultsWriteError(Exception):
    """The results folder stopped taking writes (disk full, quota, read-only, removed):
    the run stops, every row that fit is kept, and the user gets one line (exit code 1)."""

    def __init__(self, path: str, reason: str, kept: int | None = None) -> None:
        self.path = path
        self.reason = reason
        self.kept = kept
        self.hint = ""
        super().__init__(self.one_line())

    def one_line(self) -> str:
        kept = "" if self.kept is None else f"; {self.kept} request rows kept"
        hint = f"; {self.hint}" if self.hint else ""
        return f"{self.path}: cannot write results ({self.reason}){kept}{hint}"


def quiet_bad_http() -> None:
    """A malformed request to one of agentbench's HTTP servers (``serve-sim``, ``record``)
    is logged as one line, not aiohttp's traceback ("Error handling request" and a dozen
    lines for a header over 8,190 bytes or a negative Content-Length): the client gets its
    400 either way. Installed once per process."""
    import logging

    log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _OneLineBadHttp) for f in log.filters):
        log.addFilter(_OneLineBadHttp())


class _OneLineBadHttp:
    def filter(self, record: object) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        exc = getattr(record, "exc_info", None)
        if exc and isinstance(exc[1], HttpProcessingError):
            why = " ".join(str(exc[1].message or exc[1]).split())[:160]
            record.msg = f"{record.getMessage()}: bad HTTP: {why}"  # type: ignore[attr-defined]
            record.args = ()  # type: ignore[attr-defined]
            record.exc_info = None  # type: ignore[attr-defined]
            record.exc_text = None  # type: ignore[attr-defined]
        return True
