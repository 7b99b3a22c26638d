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
    """Values of ``url``'s query string (``?api-key=...``), treated as secrets, in every
    form they may show in: as written, decoded, and encoded again (``_encodings``)."""
    from urllib.parse import urlsplit

    try:
        query = urlsplit(url).query
    except ValueError:
        return []
    out: list[str] = []
    for part in query.split("&"):
        raw = part.partition("=")[2]
        if raw:
            out.extend(_encodings(raw))
    return out


_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _encodings(raw: str) -> set[str]:
    """A query value as written (``sk%2Dab+c``) and in the forms a URL library, a server
    or a message may turn it into: decoded (``+`` as itself and as a space), encoded again
    (``%20`` or ``+`` for a space), hex digits in either case, and with only the
    unreserved characters decoded (as yarl normalizes a URL)."""
    from urllib.parse import quote, quote_plus, unquote, unquote_plus

    decoded = {unquote(raw), unquote_plus(raw)}
    forms = {raw, *decoded}
    for v in decoded:
        forms |= {quote(v, safe=""), quote_plus(v, safe=""), quote(v)}
    for f in list(forms):
        forms.add(_ESCAPE.sub(lambda m: m.group(0).upper(), f))
        forms.add(_ESCAPE.sub(lambda m: m.group(0).lower(), f))
        forms.add(_ESCAPE.sub(lambda m: chr(int(m.group(1), 16))
                              if chr(int(m.group(1), 16)) in _UNRESERVED
                              else m.group(0).upper(), f))
    return forms


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


def basic_credentials(user: str | None, password: str | None) -> str:
    """The ``Authorization: Basic`` value of a URL's user-info: user and password
    percent-decoded first (``p%40ss`` in a URL is the password ``p@ss``, RFC 3986)."""
    import base64
    from urllib.parse import unquote

    pair = f"{unquote(user or '')}:{unquote(password or '')}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


def url_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``url`` without its ``user:password@`` part, and the user and password (None when
    absent; as written in the URL, percent-encoded)."""
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


#: an auth scheme before a marker (``Bearer ``, ``Basic ``, ``Token ``): not a secret
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9._-]*[ \t]+")


def _literals(value: str) -> list[str]:
    """The text of ``value`` around its ``${NAME}`` markers; an auth scheme that starts it
    (``Bearer ${TOKEN}``) is not part of them."""
    parts = _ENV_MARKER.split(value)[0::2]
    return parts[1:] if _SCHEME.fullmatch(parts[0]) else parts


def keep_markers(value: str) -> str:
    """A secret value as run.json shows it: ``<redacted>``, but for its ``${NAME}``
    markers, which name the variable the value comes from and stay (``Bearer ${TOKEN}``
    keeps its scheme too; the text around a marker is redacted)."""
    if not _ENV_MARKER.search(value):
        return "<redacted>"
    scheme = _SCHEME.match(value)
    head = scheme.group(0) if scheme and value.startswith("${", scheme.end()) else ""
    out = [head]
    for i, part in enumerate(_ENV_MARKER.split(value[len(head):])):
        if i % 2:
            out.append("${" + part + "}")
        elif part:
            out.append("<redacted>")
    return "".join(out)


def env_names(obj: Any) -> list[str]:
    """The names of the ``${NAME}`` markers in ``obj`` (a string or JSON-like value), in
    order, each once."""
    names: list[str] = []
    if isinstance(obj, str):
        names = [m.group(1) for m in _ENV_MARKER.finditer(obj)]
    elif isinstance(obj, dict):
        names = [n for v in obj.values() for n in env_names(v)]
    elif isinstance(obj, list):
        names = [n for v in obj for n in env_names(v)]
    return list(dict.fromkeys(names))


def unset_env(obj: Any) -> list[str]:
    """The ``${NAME}`` markers in ``obj`` whose environment variable is not set, in order,
    each once (what ``expand_env`` would refuse)."""
    return [n for n in env_names(obj) if os.environ.get(n) is None]


def env_read(endpoints: Any) -> dict[str, str]:
    """The environment variables ``endpoints`` read when they connect (each one's
    ``api_key_env`` and the ``${NAME}`` markers of its ``headers`` and ``extra_body``) that
    are set here, with their values: what a process on another host (a Ray load worker)
    needs to send what this one sends, whatever its own environment holds."""
    names: list[str] = []
    for cfg in endpoints:
        if getattr(cfg, "api_key_env", None):
            names.append(cfg.api_key_env)
        for key in ("headers", "extra_body"):
            names.extend(env_names(getattr(cfg, key, None) or {}))
    return {n: os.environ[n] for n in dict.fromkeys(names) if n in os.environ}


def _value_secrets(value: str) -> list[str]:
    """A secret value in the forms it may show in: whole and, after an auth scheme
    (``Bearer xyz``), the token alone; ``${NAME}`` markers expanded. The markers
    themselves are names, not secrets (run.json keeps them); the text around them is."""
    whole = value
    if _ENV_MARKER.search(value):
        with contextlib.suppress(InputError):  # an unset variable is reported when used
            whole = expand_env(value, "")
        out = [s.strip() for s in _literals(value)]
        if whole == value:
            return out
    else:
        out = []
    out.append(whole)
    if " " in whole.strip():  # "Bearer xyz": the token alone too
        out.append(whole.strip().split(None, 1)[1])
    return out


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
        return _value_secrets(v) if v else []
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return [str(v)] if len(str(v)) >= 6 else []
    if isinstance(v, dict):
        return [s for x in v.values() for s in _strings(x)]
    if isinstance(v, list):
        return [s for x in v for s in _strings(x)]
    return []


def secrets_of(cfg: Any) -> tuple[str, ...]:
    """Values that must never reach results: the API key, every header value not on the
    harmless list, the URL's user and password and query values (``_encodings``), and
    ``extra_body`` values under secret-looking keys, ``${NAME}`` markers expanded (the
    markers themselves are not secrets: run.json keeps them). Longest first, so a secret
    inside another is redacted whole. Values shorter than ``MIN_SECRET`` characters are
    left out: scrubbing them from free text would mangle it (run.json redacts them where
    they stand, see ``rundir``)."""
    import base64

    out: list[str] = []
    env = getattr(cfg, "api_key_env", None)
    if env and os.environ.get(env):
        out.append(os.environ[env])
    for k, v in (getattr(cfg, "headers", None) or {}).items():
        if k.lower() not in HARMLESS_HEADERS and v:
            out.extend(_value_secrets(v))
    for url in (getattr(cfg, "url", None), getattr(cfg, "metrics_url", None)):
        if url:
            _, user, password = url_userinfo(url)
            if password:
                from urllib.parse import unquote

                out += [password, unquote(password)]
                out.append(base64.b64encode(f"{user or ''}:{password}".encode()).decode())
                out.append(basic_credentials(user, password).removeprefix("Basic "))
            if user and password:
                out.append(f"{user}:{password}")
            out.extend(_query_values(url))
    out.extend(_secret_values(getattr(cfg, "extra_body", None) or {}))
    out.extend(_env_values(cfg))
    return tuple(sorted({s for s in out if len(s) >= MIN_SECRET}, key=len, reverse=True))
