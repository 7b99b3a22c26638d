"""Secrets of an endpoint's configuration: which header values and ``extra_body`` fields
are secret, URL user-info and query values, ``${NAME}`` values from the environment, and
the list of strings that must never reach a result file, a report or the terminal."""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any

from agentbench.errors import InputError

#: header values written to results as they are; every other header value is a secret
HARMLESS_HEADERS = ("accept", "accept-encoding", "accept-language", "content-type",
                    "user-agent", "cache-control", "connection", "x-request-id",
                    "x-session-id", "openai-beta")
#: ``extra_body`` keys whose values are secrets (matched case-insensitively, in part)
SECRET_KEY_PARTS = ("key", "token", "secret", "password", "passwd", "auth", "credential",
                    "cookie", "signature")


MIN_SECRET = 4


def secret_key(key: str) -> bool:
    k = key.lower()
    return any(p in k for p in SECRET_KEY_PARTS)


def _query_values(url: str) -> list[str]:
    """Values of ``url``'s query string (``?api-key=...``): treated as secrets."""
    from urllib.parse import parse_qsl, urlsplit

    try:
        return [v for _, v in parse_qsl(urlsplit(url).query) if v]
    except ValueError:
        return []


def query_of(url: str) -> str:
    from urllib.parse import urlsplit

    try:
        q = urlsplit(url).query
    except ValueError:
        return ""
    return f"?{q}" if q else ""


def without_query(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    try:
        u = urlsplit(url)
    except ValueError:
        return url
    return urlunsplit((u.scheme, u.netloc, u.path, "", ""))


def url_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``url`` without its ``user:password@`` part, and the user and password (None when
    absent)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        u = urlsplit(url)
    except ValueError:
        return url, None, None
    if u.username is None and u.password is None:
        return url, None, None
    host = u.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{u.port}" if u.port is not None else "")
    return urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment)), u.username, u.password


#: ``${NAME}`` in a header or ``extra_body`` value: the environment variable's value, sent
#: but never written (run.json keeps the marker; the value is redacted wherever it shows)
_ENV_MARKER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(obj: Any, where: str, found: list[str] | None = None) -> Any:
    """``obj`` (a string or JSON-like value) with every ``${NAME}`` replaced by the
    environment variable; the values put in are appended to ``found``. A variable that is
    not set is a one-line error naming it and ``where``."""
    if isinstance(obj, str):
        def sub(m: re.Match[str]) -> str:
            value = os.environ.get(m.group(1))
            if value is None:
                raise InputError(f"environment variable {m.group(1)} is not set",
                                 field=where)
            if found is not None:
                found.append(value)
            return value
        return _ENV_MARKER.sub(sub, obj) if "${" in obj else obj
    if isinstance(obj, dict):
        return {k: expand_env(v, f"{where}.{k}", found) for k, v in obj.items()}
    if isinstance(obj, list):
        return [expand_env(v, f"{where}.{i}", found) for i, v in enumerate(obj)]
    return obj


def _env_values(cfg: Any) -> list[str]:
    found: list[str] = []
    for key in ("headers", "extra_body"):
        with contextlib.suppress(InputError):  # an unset variable is reported when used
            expand_env(getattr(cfg, key, None) or {}, key, found)
    return found


def _secret_values(obj: Any) -> list[str]:
    """String values under secret-looking keys of a JSON-like object, at any depth."""
    out: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, str) and secret_key(k):
                out.extend(_strings(v))
            else:
                out.extend(_secret_values(v))
    elif isinstance(obj, list):
        for v in obj:
            out.extend(_secret_values(v))
    return out


def _strings(v: Any) -> list[str]:
    if isinstance(v, str):
        return [v] if v else []
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return [str(v)] if len(str(v)) >= 6 else []
    if isinstance(v, dict):
        return [s for x in v.values() for s in _strings(x)]
    if isinstance(v, list):
        return [s for x in v for s in _strings(x)]
    return []


def secrets_of(cfg: Any) -> tuple[str, ...]:
    """Values that must never reach results: the API key, every header value not on the
    harmless list, the URL's user and password, and ``extra_body`` values under
    secret-looking keys. Longest first, so a secret inside another is redacted whole.
    Values shorter than ``MIN_SECRET`` characters are left out: scrubbing them from free
    text would mangle it (run.json redacts them where they stand, see ``rundir``)."""
    import base64

    out: list[str] = []
    env = getattr(cfg, "api_key_env", None)
    if env and os.environ.get(env):
        out.append(os.environ[env])
    for k, v in (getattr(cfg, "headers", None) or {}).items():
        if k.lower() not in HARMLESS_HEADERS and v:
            out.append(v)
            if " " in v.strip():  # "Bearer xyz": the token alone too
                out.append(v.strip().split(None, 1)[1])
    for url in (getattr(cfg, "url", None), getattr(cfg, "metrics_url", None)):
        if url:
            _, user, password = url_userinfo(url)
            if password:
                out.append(password)
                out.append(base64.b64encode(f"{user or ''}:{password}".encode()).decode())
            if user and password:
                out.append(f"{user}:{password}")
            out.extend(_query_values(url))
    out.extend(_secret_values(getattr(cfg, "extra_body", None) or {}))
    out.extend(_env_values(cfg))
    return tuple(sorted({s for s in out if len(s) >= MIN_SECRET}, key=len, reverse=True))
