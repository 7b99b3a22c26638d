"""Public trace corpora on demand: ``agentbench traces fetch NAME`` downloads the files of
a corpus named in ``corpora.yaml``, checks each one's SHA-256, and keeps them in the user's
cache, where ``cache:NAME`` (or ``cache:NAME/SUBPATH``) reads them.

Layout: ``<cache>/traces/NAME/files/`` holds the downloads (and what an archive's member
folder extracts to); ``<cache>/traces/NAME/manifest.json`` is written last, so a corpus is
usable only once every file arrived and matched. ``<cache>`` is ``AGENTBENCH_CACHE``, else
``$XDG_CACHE_HOME/agentbench``, else ``~/.cache/agentbench``.

A file whose registry entry has no ``sha256`` is trusted on first use: the manifest records
the hash the first download got, and a later fetch must match it. A file already in place
(put there by hand, as the offline error says) is checked, not downloaded again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from agentbench.errors import InputError

REGISTRY = Path(__file__).with_name("corpora.yaml")
_CHUNK = 1 << 20
#: the most bytes one download may bring unless its registry entry says otherwise (an
#: endless or runaway mirror stops here instead of filling the cache)
MAX_DOWNLOAD_BYTES = 16 << 30
#: what an archive may extract to: at most this many times its own size, and at most
#: ``MAX_DOWNLOAD_BYTES`` (text traces compress 5-20x; a bomb compresses 1000x)
MAX_EXTRACT_RATIO = 100


@dataclass(frozen=True)
class CorpusFile:
    """One download: ``name`` in the corpus folder, ``url``, ``sha256`` (None: trust on first
    use), and for an archive the member folder to extract (``member``, ``to``, ``suffix``)."""

    name: str
    url: str
    sha256: str | None = None
    extract: dict[str, str] | None = None
    #: the most bytes this download may bring (None: ``MAX_DOWNLOAD_BYTES``)
    max_bytes: int | None = None


@dataclass(frozen=True)
class Corpus:
    """A fetchable corpus: what it is, its licence, the reader (``format``) and the path
    (inside ``files/``) that ``cache:NAME`` reads."""

    name: str
    description: str
    homepage: str
    licence: str
    format: str
    path: str
    files: list[CorpusFile] = field(default_factory=list)


def registry(path: Path = REGISTRY) -> dict[str, Corpus]:
    """The corpora of ``corpora.yaml`` (or another registry file), by name."""
    import yaml

    data = yaml.safe_load(path.read_text()) or {}
    return {name: Corpus(name=name, description=e["description"], homepage=e["homepage"],
                         licence=e["licence"], format=e["format"], path=e.get("path", "."),
                         files=[CorpusFile(**f) for f in e["files"]])
            for name, e in data.items()}


def cache_root() -> Path:
    """agentbench's cache folder (``AGENTBENCH_CACHE``, XDG, ``~/.cache/agentbench``)."""
    env = os.environ.get("AGENTBENCH_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "agentbench"


def corpus_dir(name: str) -> Path:
    return cache_root() / "traces" / name


def manifest(name: str) -> dict[str, Any] | None:
    """What a complete fetch of ``name`` recorded, or None when it was not fetched."""
    p = corpus_dir(name) / "manifest.json"
    try:
        data: dict[str, Any] = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return data


def _corpus(name: str, corpora: dict[str, Corpus] | None) -> Corpus:
    corpora = registry() if corpora is None else corpora
    if name not in corpora:
        raise InputError(f"unknown corpus {name!r} (known: {', '.join(sorted(corpora))})")
    return corpora[name]


def resolve_cache(spec: str, corpora: dict[str, Corpus] | None = None) -> tuple[Path, str]:
    """(path, format) that ``cache:NAME[/SUBPATH]`` reads; an error naming the fetch
    command when the corpus is not in the cache."""
    name, _, sub = spec.partition("/")
    corpus = _corpus(name, corpora)
    if manifest(name) is None:
        raise InputError(f"not fetched yet: run `agentbench traces fetch "
                         f"{name}` (it downloads {corpus.homepage} into "
                         f"{corpus_dir(name)})", source=f"cache:{spec}")
    base = corpus_dir(name) / "files" / corpus.path
    path = base / sub if sub else base
    inside = False
    with contextlib.suppress(OSError, RuntimeError, ValueError):  # a loop, a NUL byte
        # an absolute SUBPATH, '..' or a link must not lead out of the corpus
        inside = path.resolve().is_relative_to(base.resolve()) and path.exists()
    if not inside or ".." in PurePosixPath(sub).parts:
        raise InputError(f"no {sub or corpus.path!r} in the fetched corpus {name}",
                         source=f"cache:{spec}")
    return path, corpus.format


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _source_url(corpus: Corpus, f: CorpusFile, mirror: str | None) -> str:
    if mirror is None:
        return f.url
    if "://" not in mirror:  # a local folder
        return (Path(mirror).expanduser().resolve() / corpus.name / f.name).as_uri()
    return f"{mirror.rstrip('/')}/{corpus.name}/{f.name}"


class TooLarge(OSError):
    """A download or an extraction past its bound."""


def _download(url: str, dest: Path, timeout: float, max_bytes: int) -> str:
    """Stream ``url`` into ``dest`` (via ``dest.part``, removed when the download fails);
    its SHA-256. More than ``max_bytes`` is a ``TooLarge`` error."""
    req = urllib.request.Request(url, headers={"User-Agent": "agentbench"})
    part = dest.with_name(dest.name + ".part")
    h = hashlib.sha256()
    n = 0
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp, part.open("wb") as out:
            while chunk := resp.read(_CHUNK):
                n += len(chunk)
                if n > max_bytes:
                    raise TooLarge(f"more than {max_bytes:,} bytes (the file's bound)")
                h.update(chunk)
                out.write(chunk)
        part.replace(dest)
    except BaseException:
        with contextlib.suppress(OSError):
            part.unlink()  # a partial file is no use and takes space
        raise
    return h.hexdigest()


def _extract(archive: Path, spec: dict[str, str], files: Path) -> int:
    """The files under ``spec['member']`` (ending in ``spec['suffix']``) of a tar archive,
    written to ``files/spec['to']``; refuses paths that leave it. Returns how many."""
    member = spec["member"].strip("/") + "/"
    suffix = spec.get("suffix", "")
    to = files / spec["to"]
    if to.exists():
        shutil.rmtree(to)
    to.mkdir(parents=True)
    try:
        n = _extract_members(archive, member, suffix, to)
    except BaseException:
        shutil.rmtree(to, ignore_errors=True)  # half an extraction is not a corpus
        raise
    if not n:
        raise InputError(f"archive holds no {member}*{suffix} files", source=str(archive))
    return n


def _extract_members(archive: Path, member: str, suffix: str, to: Path) -> int:
    budget = min(MAX_DOWNLOAD_BYTES, MAX_EXTRACT_RATIO * max(archive.stat().st_size, 1 << 20))
    n = 0
    with tarfile.open(archive) as tar:
        for m in tar:
            if not (m.isfile() and m.name.startswith(member) and m.name.endswith(suffix)):
                continue
            rel = PurePosixPath(m.name[len(member):])
            if rel.is_absolute() or ".." in rel.parts:
                raise InputError(f"archive member {m.name!r} leaves its folder",
                                 source=str(archive))
            src = tar.extractfile(m)
            if src is None:
                continue
            budget -= m.size  # the header's size; the copy below is bounded by it too
            if budget < 0:
                raise InputError(f"extracts to more than {MAX_EXTRACT_RATIO} times its size "
                                 "(an archive bomb?); nothing kept", source=str(archive))
            target = to.joinpath(*rel.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with src, target.open("wb") as out:
                shutil.copyfileobj(src, out)
            n += 1
    return n


def fetch(name: str, *, mirror: str | None = None, corpora: dict[str, Corpus] | None = None,
          log: Callable[[str], None] | None = None, timeout: float = 60.0) -> Path:
    """Download (or check in place) every file of corpus ``name`` and write its manifest;
    return the corpus folder. ``mirror`` (a URL or a local folder) serves
    ``<mirror>/<name>/<file>`` instead of the upstream URLs."""
    corpus = _corpus(name, corpora)
    say = log or (lambda _m: None)
    root = corpus_dir(name)
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    known = {f["name"]: f["sha256"] for f in (manifest(name) or {}).get("files", [])}
    (root / "manifest.json").unlink(missing_ok=True)  # usable again only once complete
    got: list[dict[str, Any]] = []
    failed: list[tuple[str, Path, str]] = []
    for f in corpus.files:
        dest = files / f.name
        want = f.sha256 or known.get(f.name)
        url = _source_url(corpus, f, mirror)
        if dest.exists() and (want is None or _sha256(dest) == want):
            digest = want or _sha256(dest)
            say(f"{dest}: already here")
        else:
            say(f"downloading {url}")
            try:
                digest = _download(url, dest, timeout, f.max_bytes or MAX_DOWNLOAD_BYTES)
            except TooLarge as e:
                raise InputError(f"{url}: {e}; nothing kept", source=f"cache:{name}") from None
            except (urllib.error.URLError, OSError, TimeoutError) as e:
                reason = getattr(e, "reason", None) or e
                failed.append((url, dest, str(reason).splitlines()[0][:120] if str(reason)
                               else type(e).__name__))
                continue
        if want is not None and digest != want:
            bad = dest.with_name(dest.name + ".bad")
            dest.replace(bad)
            raise InputError(f"SHA-256 of {url} is {digest}, expected {want} "
                             f"({'registry' if f.sha256 else 'first download'}); "
                             f"the file is kept at {bad}", source=f"cache:{name}")
        got.append({"name": f.name, "url": f.url, "sha256": digest,
                    "pinned": f.sha256 is not None})
    if failed:
        todo = "; ".join(f"{u} -> {d}" for u, d, _ in failed)
        raise InputError(f"cannot download {name} ({failed[0][2]}): download {todo}, then run "
                         f"`agentbench traces fetch {name}` again (or pass --mirror DIR "
                         f"holding DIR/{name}/<file>)", source=f"cache:{name}")
    for f in corpus.files:
        if f.extract:
            n = _extract(files / f.name, f.extract, files)
            say(f"extracted {n} files to {files / f.extract['to']}")
    record = {"name": name, "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "format": corpus.format, "path": corpus.path, "licence": corpus.licence,
              "homepage": corpus.homepage, "files": got}
    tmp = root / "manifest.json.part"
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(root / "manifest.json")
    return root
