"""`pip install -r requirements.txt` and `pip install .` work where the project runs: linux x86_64 and
linux aarch64 (Raspberry Pi 4/5, Jetson), Python 3.11 to 3.13.

Offline: TensorFlow comes from exactly one distribution on every platform (tensorflow-cpu on linux x86_64,
tensorflow elsewhere: tensorflow-cpu has no aarch64 wheels), and setup.py installs requirements.txt's runtime part.

Online (`slow`): every requirement and everything it pulls in has a wheel for the target, resolved against the
package registry without installing or downloading a wheel. The markers are evaluated for the target (pip
evaluates them for this machine even with --platform); versions come from the registry's simple API (PEP 691
JSON, or PEP 503 HTML), and each chosen wheel's METADATA is read with HTTP range requests: the registry serves
no PEP 658 metadata files here, so pip 23.2's `install --dry-run --report --platform ...` downloads every
wheel it resolves (~400 MB per target, TensorFlow's 282 MB of it). Like pip, the resolution takes the newest
release that every requirer's specifier allows and that has a wheel for the target; it does not backtrack,
so a dead end fails, naming it. Skipped only when the registry cannot be reached.
"""
import email.parser
import html
import io
import json
import os
import re
import runpy
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import pytest
import setuptools
from packaging import tags as wheel_tags
from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename, canonicalize_name, parse_sdist_filename,
                             parse_wheel_filename)
from packaging.version import InvalidVersion

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUIREMENTS = os.path.join(ROOT, "requirements.txt")
INDEX = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
# The oldest glibc of the boards' systems that run Python 3.11+: Ubuntu 20.04 (JetPack 5) has 2.31,
# Ubuntu 22.04 (JetPack 6) 2.35, Raspberry Pi OS bookworm 2.36. A wheel needing a newer one fails here.
GLIBC_MINOR = 31
PYTHONS = ("3.11", "3.12", "3.13")
TEST_TOOLS = {"pytest", "hypothesis", "websocket-client"}


# --- requirements.txt and the targets -----------------------------------------------------------------------

def read_requirements(path=REQUIREMENTS, until=None):
    """The file's requirements (down to a line starting with `until`, if given), comments dropped."""
    out = []
    with open(path) as f:
        for line in f:
            if until and line.startswith(until):
                break
            line = re.sub(r"(^|\s)#.*", "", line).strip()
            if line:
                assert not line.startswith("-"), "pip options in %s are not checked here: %r" % (path, line)
                out.append(line)
    return out


def marker_env(machine, python="3.11", system="linux"):
    """PEP 508 marker variables of CPython `python` on `system`/`machine` (not this machine's)."""
    return {"implementation_name": "cpython", "implementation_version": python + ".0",
            "os_name": "nt" if system == "win32" else "posix", "platform_machine": machine,
            "platform_python_implementation": "CPython", "platform_release": "",
            "platform_system": {"linux": "Linux", "darwin": "Darwin", "win32": "Windows"}[system],
            "platform_version": "", "python_full_version": python + ".0", "python_version": python,
            "sys_platform": system, "extra": ""}


def applies(req, env, extra=""):
    return req.marker is None or req.marker.evaluate({**env, "extra": extra})


class Target:
    """CPython `python` on linux `machine` with glibc 2.GLIBC_MINOR: its marker variables and wheel tags
    (most specific first, as pip ranks them)."""

    def __init__(self, machine, python):
        self.machine, self.python = machine, python
        self.env = marker_env(machine, python)
        platforms = []
        for minor in range(GLIBC_MINOR, 17 - 1 if machine == "aarch64" else 5 - 1, -1):
            platforms.append("manylinux_2_%d_%s" % (minor, machine))
            legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}.get(minor)
            if legacy and (minor == 17 or machine == "x86_64"):
                platforms.append("%s_%s" % (legacy, machine))
        platforms.append("linux_" + machine)
        version = tuple(int(p) for p in python.split("."))
        interpreter = "cp%d%d" % version
        self.tags = list(wheel_tags.cpython_tags(version, [interpreter], platforms))
        self.tags += list(wheel_tags.compatible_tags(version, interpreter, platforms))
        self.rank = {tag: i for i, tag in enumerate(self.tags)}
        self.wheels = {}  # target_wheels' answers

    def __str__(self):
        return "CPython %s, linux %s, glibc 2.%d" % (self.python, self.machine, GLIBC_MINOR)


# --- the registry -------------------------------------------------------------------------------------------

class RegistryUnreachable(Exception):
    """No connection to the registry (DNS, refused, reset, timeout, TLS): not an answer from it."""


_SSL = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
_FILES, _REQUIRES, _LOCK = {}, {}, threading.Lock()
_ADDRESSES, _DNS_LOCK, _getaddrinfo = {}, threading.Lock(), socket.getaddrinfo


def _getaddrinfo_once(*args, **kwargs):
    """socket.getaddrinfo one at a time, each answer kept: concurrent look-ups of two hosts stall 5 s on
    some resolvers (this machine's), and the resolution makes ~140 requests to two hosts."""
    key = (args, tuple(sorted(kwargs.items())))
    with _DNS_LOCK:
        if key not in _ADDRESSES:
            _ADDRESSES[key] = _getaddrinfo(*args, **kwargs)
        return _ADDRESSES[key]


def _get(url, headers=None, attempts=3):
    """(status, headers, body) of a GET; retries connection failures and 5xx, raises other HTTP errors."""
    request = urllib.request.Request(url, headers={"User-Agent": "edgemesh-tf-tests", **(headers or {})})
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(request, timeout=60, context=_SSL) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as e:
            if e.code < 500 or attempt == attempts - 1:
                raise
        except (OSError, EOFError) as e:  # URLError (no HTTP answer), socket errors, timeouts
            if attempt == attempts - 1:
                raise RegistryUnreachable("%s: %s" % (url, getattr(e, "reason", None) or e)) from e
        time.sleep(1 + 2 * attempt)


def project_files(name):
    """[{filename, url, requires_python, yanked}] of a project on the index; None if it has no such project."""
    name = canonicalize_name(name)
    with _LOCK:
        if name in _FILES:
            return _FILES[name]
    url = "%s/%s/" % (INDEX, name)
    try:
        _, headers, body = _get(url, {"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
        files = None
    else:
        if "json" in headers.get("Content-Type", ""):
            files = [{"filename": f["filename"], "url": urllib.parse.urljoin(url, f["url"]),
                      "requires_python": f.get("requires-python"), "yanked": bool(f.get("yanked"))}
                     for f in json.loads(body)["files"]]
        else:
            files = []
            for m in re.finditer(r"<a\s([^>]*)>([^<]*)</a>", body.decode("utf-8")):
                attrs = {k: html.unescape(v) for k, v in re.findall(r'([\w-]+)="([^"]*)"', m.group(1))}
                files.append({"filename": html.unescape(m.group(2)).strip(),
                              "url": urllib.parse.urljoin(url, attrs["href"]),
                              "requires_python": attrs.get("data-requires-python") or None,
                              "yanked": "data-yanked" in attrs})
    with _LOCK:
        _FILES[name] = files
    return files


class _RemoteFile(io.RawIOBase):
    """A remote file read with HTTP range requests, for zipfile: the wheel's central directory and METADATA
    come down, the rest does not. A server that ignores Range sends the whole file (slower, still right)."""

    CHUNK = 64 * 1024

    def __init__(self, url):
        super().__init__()
        self.url, self.pos = url, 0
        self._fetch("bytes=-%d" % self.CHUNK)

    def _fetch(self, byte_range):
        status, headers, body = _get(self.url, {"Range": byte_range})
        if status == 206:
            start, total = re.match(r"bytes (\d+)-\d+/(\d+)", headers["Content-Range"]).groups()
            self.size, self.buffer = int(total), (int(start), body)
        else:
            self.size, self.buffer = len(body), (0, body)

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=io.SEEK_SET):
        self.pos = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence] + offset
        return self.pos

    def read(self, n=-1):
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        start, data = self.buffer
        if not (start <= self.pos and end <= start + len(data)):
            self._fetch("bytes=%d-%d" % (self.pos, min(self.size, max(end, self.pos + self.CHUNK)) - 1))
            start, data = self.buffer
        out = data[self.pos - start:end - start]
        self.pos += len(out)
        return out

    def readinto(self, b):
        out = self.read(len(b))
        b[:len(out)] = out
        return len(out)


def requires_dist(wheel):
    """The Requires-Dist lines of a wheel on the index, from its METADATA."""
    url = wheel["url"].split("#", 1)[0]
    with _LOCK:
        if url in _REQUIRES:
            return _REQUIRES[url]
    with zipfile.ZipFile(_RemoteFile(url)) as z:
        names = [n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        assert len(names) == 1, "%s: METADATA files %s" % (wheel["filename"], names)
        metadata = email.parser.HeaderParser().parsestr(z.read(names[0]).decode("utf-8"))
    requires = [Requirement(r) for r in metadata.get_all("Requires-Dist") or []]
    with _LOCK:
        _REQUIRES[url] = requires
    return requires


# --- the resolution -----------------------------------------------------------------------------------------

def target_wheels(name, target):
    """{version: [wheel, ...best first]} of the project's wheels installable on the target."""
    if name in target.wheels:
        return target.wheels[name]
    out = defaultdict(list)
    for f in project_files(name) or []:
        if not f["filename"].endswith(".whl") or f["yanked"]:
            continue
        try:
            _, version, _, tags = parse_wheel_filename(f["filename"])
            if f["requires_python"] and not SpecifierSet(f["requires_python"]).contains(
                    target.env["python_full_version"], prereleases=True):
                continue
        except (InvalidWheelFilename, InvalidVersion, InvalidSpecifier):
            continue
        rank = min((target.rank[t] for t in tags if t in target.rank), default=None)
        if rank is not None:
            out[version].append((rank, f))
    target.wheels[name] = {v: [f for _, f in sorted(files, key=lambda rf: rf[0])] for v, files in out.items()}
    return target.wheels[name]


def no_wheel(name, specifier, requirers, target):
    """Why `name` has no wheel for the target: the releases the specifier allows, and what they ship."""
    why = "%s%s (required by %s): " % (name, specifier, ", ".join(sorted(set(requirers))))
    files = project_files(name)
    if files is None:
        return why + "no such project on %s" % INDEX
    by_version = defaultdict(list)
    for f in files:
        try:
            if f["filename"].endswith(".whl"):
                by_version[parse_wheel_filename(f["filename"])[1]].append(f)
            elif f["filename"].endswith((".tar.gz", ".zip")):
                by_version[parse_sdist_filename(f["filename"])[1]].append(f)
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            continue
    allowed = sorted(specifier.filter(by_version), reverse=True)
    if not allowed:
        return why + "no release allows it (newest: %s)" % ", ".join(map(str, sorted(by_version)[-3:]))
    newest = allowed[0]
    shipped = sorted(f["filename"] for f in by_version[newest])
    return why + "no wheel for %s; %s %s ships: %s" % (target, name, newest, ", ".join(shipped) or "nothing")


class Pick:
    def __init__(self, name, version, wheel, requires):
        self.name, self.version, self.wheel, self.requires = name, version, wheel, requires


def resolve(requirements, target, rounds=20):
    """({name: Pick}, [problem]) for the requirement strings on the target; raises RegistryUnreachable."""
    roots = [Requirement(r) for r in requirements]
    picks, pool = {}, ThreadPoolExecutor(8)
    with mock.patch.object(socket, "getaddrinfo", _getaddrinfo_once), pool:
        for _ in range(rounds):
            # Every requirement reached from the roots through the current picks (and the extras asked for).
            needed, expanded = defaultdict(list), set()
            todo = [(r, "requirements.txt") for r in roots if applies(r, target.env)]
            while todo:
                req, by = todo.pop()
                name = canonicalize_name(req.name)
                needed[name].append((req, by))
                pick = picks.get(name)
                for extra in ([""] + sorted(req.extras)) if pick else []:
                    if (name, extra) not in expanded:
                        expanded.add((name, extra))
                        todo += [(dep, "%s %s" % (name, pick.version)) for dep in pick.requires
                                 if applies(dep, target.env, extra)]
            list(pool.map(project_files, needed))
            chosen, problems = {}, []
            for name, reqs in needed.items():
                specifier = SpecifierSet()
                for req, _ in reqs:
                    specifier &= req.specifier
                wheels = target_wheels(name, target)
                allowed = list(specifier.filter(wheels))
                if allowed:
                    version = max(allowed)
                    chosen[name] = (version, wheels[version][0])
                else:
                    problems.append(no_wheel(name, specifier, [by for _, by in reqs], target))
            new = [(n, v, w) for n, (v, w) in chosen.items() if n not in picks or picks[n].version != v]
            for (name, version, wheel), requires in zip(new, pool.map(lambda nvw: requires_dist(nvw[2]), new)):
                picks[name] = Pick(name, version, wheel, requires)
            stale = set(picks) - set(chosen)
            for name in stale:
                del picks[name]
            if not new and not stale:
                return picks, sorted(problems)
        return picks, problems + ["the resolution did not settle in %d rounds" % rounds]


def glibc_floor(pick, target):
    """The oldest glibc minor (2.x) on which some wheel of the picked release installs; 0 with a pure-Python one."""
    legacy = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5}
    floors = []
    for wheel in target_wheels(pick.name, target)[pick.version]:
        minors = [0]
        for tag in parse_wheel_filename(wheel["filename"])[3]:
            m = re.fullmatch(r"manylinux_2_(\d+)_%s" % target.machine, tag.platform)
            prefix = tag.platform[:-len(target.machine) - 1]
            if m or prefix in legacy:
                minors.append(int(m.group(1)) if m else legacy[prefix])
        floors.append(min(minors[1:] or minors))
    return min(floors)


# --- tests --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("system, machine, expected", [
    ("linux", "x86_64", "tensorflow-cpu"), ("linux", "aarch64", "tensorflow"),
    ("darwin", "arm64", "tensorflow"), ("win32", "AMD64", "tensorflow"), ("linux", "armv7l", "tensorflow"),
])
def test_one_tensorflow_distribution_on_every_platform(system, machine, expected):
    env = marker_env(machine, system=system)
    tf = [r for r in map(Requirement, read_requirements())
          if canonicalize_name(r.name) in ("tensorflow", "tensorflow-cpu") and applies(r, env)]
    assert [canonicalize_name(r.name) for r in tf] == [expected]
    assert str(tf[0].specifier) == "==2.21.0"


def test_setup_py_installs_the_runtime_requirements():
    captured = {}
    with mock.patch.object(setuptools, "setup", lambda **kw: captured.update(kw)), \
            mock.patch.object(setuptools, "find_packages", lambda **kw: []):
        runpy.run_path(os.path.join(ROOT, "setup.py"))
    install_requires = captured["install_requires"]
    assert install_requires == read_requirements(until="# Tests")
    names = {canonicalize_name(Requirement(r).name) for r in install_requires}
    assert {"tensorflow", "tensorflow-cpu", "mesh-tensorflow"} <= names and not names & TEST_TOOLS
    assert TEST_TOOLS <= {canonicalize_name(Requirement(r).name) for r in read_requirements()}


def test_the_resolution_names_what_has_no_wheel():
    """Offline, on a made-up index: a pure-Python and an x86_64-only project for an aarch64 target."""
    files = {"purepy": [{"filename": "purepy-1.0-py3-none-any.whl", "url": "https://i/purepy-1.0-py3-none-any.whl",
                         "requires_python": ">=3.8", "yanked": False}],
             "x86only": [{"filename": "x86only-2.0-cp311-cp311-manylinux_2_27_x86_64.whl", "url": "https://i/x",
                          "requires_python": None, "yanked": False}]}
    requires = {"https://i/purepy-1.0-py3-none-any.whl": [Requirement("x86only>=2; python_version >= '3.10'"),
                                                          Requirement("skipped; sys_platform == 'win32'")],
                "https://i/x": []}
    with mock.patch.dict(_FILES, files, clear=True), mock.patch.dict(_REQUIRES, requires, clear=True):
        picks, problems = resolve(["purepy"], Target("aarch64", "3.11"))
        assert list(picks) == ["purepy"] and str(picks["purepy"].version) == "1.0"
        assert problems == ["x86only>=2 (required by purepy 1.0): no wheel for CPython 3.11, linux aarch64, glibc "
                            "2.31; x86only 2.0 ships: x86only-2.0-cp311-cp311-manylinux_2_27_x86_64.whl"]
        picks, problems = resolve(["purepy"], Target("x86_64", "3.11"))
        assert sorted(picks) == ["purepy", "x86only"] and not problems


@pytest.mark.slow
@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("machine", ["aarch64", "x86_64"])
def test_requirements_have_wheels_for_the_boards(machine, python):
    """Everything `pip install -r requirements.txt` installs on the target comes as a wheel from the registry
    (what `pip install .` installs is a part of it)."""
    start, target = time.monotonic(), Target(machine, python)
    try:
        project_files("pip")  # the registry answers (a 404 is an answer too)
        picks, problems = resolve(read_requirements(), target)
    except RegistryUnreachable as e:
        pytest.skip("the package registry (%s) cannot be reached, so the wheels are not checked: %s" % (INDEX, e))
    floor = max([(glibc_floor(p, target), name) for name, p in picks.items()] or [(0, "")])
    print("\n%s: %d distributions resolved in %.1f s; they install from glibc 2.%d (%s)" % (
        target, len(picks), time.monotonic() - start, floor[0], floor[1]))
    for name in sorted(picks):
        print("  %-28s %-14s %s" % (name, picks[name].version, picks[name].wheel["filename"]))
    assert not problems, "no wheel on %s for:\n  %s" % (target, "\n  ".join(problems))
    names = {canonicalize_name(Requirement(r).name) for r in read_requirements()}
    assert names - {"tensorflow", "tensorflow-cpu"} <= set(picks)
    assert ("tensorflow-cpu" if machine == "x86_64" else "tensorflow") in picks
