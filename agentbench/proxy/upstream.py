"""The ``--upstream`` URL of ``agentbench record``: where each request goes (its path joined
onto the URL's path, the URL's query kept on every request, as Azure's ``?api-version=``
needs), the credentials that go with it, and the URL as printed and stored (no
``user:password@``, query values redacted: they are often keys)."""

from __future__ import annotations

from dataclasses import dataclass


def upstream_root(url: str) -> str:
    """The upstream base the request path is appended to: ``url`` without its query and
    a trailing ``/v1`` (clients send ``/v1/...`` paths), so ``http://h:8000`` and
    ``http://h:8000/v1`` mean the same server."""
    from agentbench.scenario.secrets import without_query

    root = without_query(url).rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


def shown(url: str) -> str:
    """The upstream as printed, sent back in an error body and stored: without its
    ``user:password@`` and with every query value ``<redacted>``."""
    from agentbench.scenario.secrets import query_of, url_userinfo, without_query

    bare = url_userinfo(url)[0]
    # every value, however short (a secret's own list skips values under 4 characters),
    # and only the query, so a value that also occurs in the host or path cannot blank them
    params = [p.partition("=") for p in query_of(bare).removeprefix("?").split("&") if p]
    query = "&".join(f"{name}=<redacted>" if eq else name for name, eq, _ in params)
    return without_query(bare).rstrip("/") + (f"?{query}" if query else "")


def merged_query(agent: str, upstream: str) -> str:
    """The agent's query string with the upstream URL's parameters added; a parameter the
    URL names replaces the agent's own of that name (as the URL's ``user:password``
    replaces the client's Authorization). Both are raw (still percent-encoded)."""
    ours = [p for p in upstream.split("&") if p]
    if not ours:
        return agent
    names = {p.partition("=")[0] for p in ours}
    return "&".join([p for p in agent.split("&") if p and p.partition("=")[0] not in names]
                    + ours)


def check_upstream(url: str) -> None:
    """An ``InputError`` (one line, the URL's password hidden) unless ``url`` is an http or
    https URL with a host: ``record --upstream notaurl`` started, then failed every call."""
    from urllib.parse import urlsplit

    from agentbench.errors import InputError

    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError:
        ok = False
    if not ok:
        raise InputError(f"expected an http:// or https:// URL with a host, got "
                         f"{shown(url)!r}", field="upstream")


@dataclass(frozen=True)
class Upstream:
    """Where the proxy forwards to: ``root`` (no user-info, query or trailing ``/v1``),
    the URL's own ``query`` (raw, '' when none), the ``Authorization: Basic`` value of
    its ``user:password@`` (or None) and the URL as ``shown``."""

    root: str
    query: str
    auth: str | None
    shown: str

    @classmethod
    def parse(cls, url: str) -> Upstream:
        from urllib.parse import urlsplit

        from agentbench.scenario.secrets import basic_credentials, url_userinfo

        bare, user, password = url_userinfo(url)
        try:
            query = urlsplit(bare).query
        except ValueError:  # not a URL: the request fails and says so (a 502)
            query = ""
        auth = None if user is None and password is None else basic_credentials(user,
                                                                                 password)
        return cls(upstream_root(bare), query, auth, shown(url))

    def url_for(self, target: str) -> str:
        """The upstream URL (still encoded) for a request ``target``: the client's path
        and query, as received."""
        path, _, query = target.partition("?")
        query = merged_query(query, self.query)
        return self.root + path + (f"?{query}" if query else "")
