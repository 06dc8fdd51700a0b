"""Outputs published as one set (issue #11, part 2).

After any failure, SIGKILL or race, an output folder holds the complete old set or the complete
new set (report.json's sha256 match the files beside it); no temporary file sits under a final
name; what a killed run left is hidden and removed by the next run; two writers of one folder are
serialized or refused, never interleaved; a folder holding files the tool did not write is refused
without --force; OS errors name the file and the folder and exit 2.

Fault injection replaces the ``os`` that :mod:`construct.io` looks its functions up in (so only
the engine's own calls fail, not pytest's or numpy's) and makes the k-th call fail, for every k.
The SIGKILL tests fork, from one subprocess, one child per kill point, each killing itself at the
k-th call; the end-to-end ones kill a real ``python -m construct build``.
"""

import errno
import functools
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

import construct
import construct.io as cio
from construct.cli import main

SET = ("weights.npz", "data.npz", "report.json")
SMALL = ["--synthetic", "independent", "--heads", "2", "--context", "3", "--dim", "4"]
E2E = ["--synthetic", "independent", "--heads", "16", "--context", "8", "--dim", "16"]
LOCK_WORDS = "another mha-construct process"
ROOT = Path(construct.__file__).resolve().parents[1]     # the code under test, also in subprocesses


def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def real(path) -> Path:
    return Path(os.path.realpath(path))


def consistent_build(folder) -> dict:
    """Assert ``folder`` holds exactly a build's set, report.json's sha256 those of the files beside
    it; return the sha256 of every file."""
    folder = Path(folder)
    assert folder.is_dir(), f"{folder} is missing"
    assert sorted(os.listdir(folder)) == sorted(SET), f"{folder} holds {sorted(os.listdir(folder))}"
    hashes = {name: sha(folder / name) for name in SET}
    rep = json.loads((folder / "report.json").read_text())
    assert rep["weights_sha256"] == hashes["weights.npz"], "report.json names other weights"
    assert rep["data"]["sha256"] == hashes["data.npz"], "report.json names other data"
    return hashes


def only(parent, *names):
    """Assert ``parent`` holds exactly ``names``: no visible and no hidden leftover."""
    assert sorted(os.listdir(parent)) == sorted(names), f"{parent} holds {sorted(os.listdir(parent))}"


def visible(parent):
    return sorted(n for n in os.listdir(parent) if not n.startswith("."))


def build(out, *extra, capsys=None):
    code = main(["build", "--out", str(out), "--quiet", *map(str, extra)])
    err = capsys.readouterr().err if capsys is not None else ""
    return code, err


def subprocess_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


def cli(out, *extra):
    return [sys.executable, "-m", "construct", "build", "--out", str(out), "--quiet", *map(str, extra)]


# --- deterministic fault injection ------------------------------------------------------------

class Faults:
    """Stands in for the ``os`` module inside construct.io: counts the calls that create, write,
    flush or rename, and makes the ``fail_at``-th one raise ``OSError(err)``, or raises SIGINT
    (Ctrl-C) as the ``interrupt_at``-th is about to be made."""

    WATCHED = ("open", "write", "fsync", "mkdir", "rename", "replace")

    def __init__(self, fail_at=None, err=errno.ENOSPC, interrupt_at=None):
        self.fail_at, self.err, self.interrupt_at = fail_at, err, interrupt_at
        self.calls = []              # (function, path it acts on, whether that path is a folder)
        self._fds = {}
        self.failed = None

    def install(self, monkeypatch, *, exchange=True):
        faults = self

        class _OS(types.ModuleType):
            def __getattr__(self, name):
                attr = getattr(os, name)
                return functools.partial(faults._call, name, attr) if name in Faults.WATCHED else attr

        monkeypatch.setattr(cio, "os", _OS("os"))
        original = getattr(cio, "_exchange", None)
        if original is not None:
            if exchange:
                monkeypatch.setattr(cio, "_exchange", functools.partial(self._call, "exchange", original))
            else:                                        # a system without renameat2
                monkeypatch.setattr(cio, "_exchange", lambda a, b: False)
        monkeypatch.setattr(cio, "_CHUNK", 1024, raising=False)   # several writes per file

    def _call(self, name, fn, *args, **kw):
        if name in ("write", "fsync"):
            target = self._fds.get(args[0])
        else:
            target = Path(os.fsdecode(args[0])) if isinstance(args[0], (str, bytes, os.PathLike)) else None
        is_dir = target is not None and os.path.isdir(target)
        self.calls.append((name, target, is_dir))
        if len(self.calls) == self.interrupt_at:       # Ctrl-C, as the call is about to be made
            signal.raise_signal(signal.SIGINT)
        if len(self.calls) == self.fail_at:
            self.failed = self.calls[-1]
            raise OSError(self.err, os.strerror(self.err))
        result = fn(*args, **kw)
        if name == "open":
            self._fds[result] = target
        return result


@pytest.fixture(scope="module")
def old_and_new(tmp_path_factory):
    """A small build's complete set (seed 1) and, for comparison, what seed 2 writes."""
    base = tmp_path_factory.mktemp("sets")
    assert build(base / "old", *SMALL, "--seed", "1") == (0, "")
    assert build(base / "new", *SMALL, "--seed", "2") == (0, "")
    old, new = consistent_build(base / "old"), consistent_build(base / "new")
    assert old["weights.npz"] != new["weights.npz"]
    return base / "old", old, new


def _count_calls(tmp_path, monkeypatch, template, exchange):
    parent = real(tmp_path / "count")
    parent.mkdir()
    if template is not None:
        shutil.copytree(template, parent / "out")
    with monkeypatch.context() as m:
        faults = Faults()
        faults.install(m, exchange=exchange)
        assert main(["build", "--out", str(parent / "out"), "--quiet", *SMALL, "--seed", "2"]) == 0
    return faults.calls


def _build_into(top, template, faults, monkeypatch, exchange):
    """A build (seed 2) with ``faults`` installed into ``top/parent/out``, which holds a copy of
    ``template``'s set, or, without one, into ``top/made/out``, whose parent is still to be made:
    ``(parent, folder, exit code)``."""
    top.mkdir()
    parent = top / "parent" if template is not None else top / "made"      # a missing parent
    folder = parent / "out"
    if template is not None:
        parent.mkdir()
        shutil.copytree(template, folder)
    with monkeypatch.context() as m:
        faults.install(m, exchange=exchange)
        code = main(["build", "--out", str(folder), "--quiet", *SMALL, "--seed", "2"])
    return parent, folder, code


@pytest.mark.parametrize("case", ["old set, renameat2", "old set, two renames", "no folder yet"])
def test_a_failing_call_at_each_point_leaves_the_old_set(tmp_path, monkeypatch, capsys, old_and_new, case):
    """ENOSPC at the k-th create/write/flush/rename of a build, for every k: exit 2, a message
    naming the file and the folder, the old set intact (or no folder), no leftover beside it."""
    template, old, new = old_and_new
    has_old = case != "no folder yet"
    exchange = case != "old set, two renames"
    calls = _count_calls(tmp_path, monkeypatch, template if has_old else None, exchange)
    capsys.readouterr()
    tolerated, problems = 0, []
    for k in range(1, len(calls) + 1):
        top, faults = real(tmp_path / f"k{k}"), Faults(fail_at=k)
        parent, folder, code = _build_into(top, template if has_old else None, faults, monkeypatch, exchange)
        err = capsys.readouterr().err
        name, target, is_dir = faults.failed
        where = f"k={k}: {name}({target})"
        try:
            if name in ("open", "fsync") and is_dir:
                # a folder's own fsync (after the files' fsync) may fail on some file systems;
                # the engine goes on: then the new set is there, complete
                tolerated += 1
                assert code == 0, err
                got = consistent_build(folder)
                assert all(got[n] == new[n] for n in SET[:2]), "not the new set"
                only(folder.parent, "out")
                continue
            if has_old:                              # every file of the old set, unchanged
                assert consistent_build(folder) == old, "the old set changed"
                only(parent, "out")
            else:
                assert not folder.exists(), "a folder was left"
                only(top)                            # the folder made for it is gone too
            assert code == 2, err
            assert "No space left on device" in err and f"[Errno {errno.ENOSPC}]" in err, err
            if target is not None and target.name in SET:
                assert f"cannot write {target.name} into {str(folder)!r}" in err, err
            else:
                assert folder.name in err and str(folder.parent) in err, err
            assert "Traceback" not in err
        except AssertionError as exc:
            problems.append(f"{where}: {exc}")
    assert not problems, "\n".join(problems) + f"\ncalls: {[c[:2] for c in calls]}"
    assert len(calls) >= 10, calls
    seen = {c[0] for c in calls}
    assert {"open", "write", "fsync", "mkdir"} <= seen, seen
    assert ("exchange" if has_old and exchange else "rename") in seen, seen
    assert sum(c[0] == "write" for c in calls) >= 6, "each file should take several writes"
    assert tolerated <= 4


@pytest.mark.parametrize("case", ["old set, renameat2", "old set, two renames", "no folder yet"])
def test_ctrl_c_at_each_point_leaves_one_complete_set_and_says_which(tmp_path, monkeypatch, capsys, old_and_new,
                                                                      case):
    """Ctrl-C at the k-th create/write/flush/rename of a build, for every k: exit 130, and either
    the old set (or no folder) with "nothing written", or the new set with "after writing" it;
    never a set half replaced, a folder missing, or a hidden leftover (found in review: Ctrl-C
    while the files were written left the hidden folder they were written to)."""
    template, old, new = old_and_new
    has_old = case != "no folder yet"
    exchange = case != "old set, two renames"
    calls = _count_calls(tmp_path, monkeypatch, template if has_old else None, exchange)
    capsys.readouterr()
    problems, outcomes = [], set()
    for k in range(1, len(calls) + 1):
        top = real(tmp_path / f"k{k}")
        parent, folder, code = _build_into(top, template if has_old else None, Faults(interrupt_at=k), monkeypatch,
                                           exchange)
        err = capsys.readouterr().err
        try:
            assert code == 130, err
            got = consistent_build(folder) if folder.exists() else {}
            if got and all(got[n] == new[n] for n in SET[:2]):          # the new weights and data
                outcomes.add("new")
                assert err == f"mha-construct build: interrupted after writing {folder}\n", err
                only(parent, "out")
            else:
                outcomes.add("old")
                if has_old:
                    assert consistent_build(folder) == old, "the old set changed"
                    only(parent, "out")
                else:
                    assert not folder.exists(), "a folder was left"
                    only(top)
                assert err == "mha-construct build: interrupted; nothing written\n", err
        except AssertionError as exc:
            problems.append(f"k={k}: {calls[k - 1][:2]}: {exc}")
    assert not problems, "\n".join(problems)
    assert outcomes == {"old", "new"}, outcomes


@pytest.mark.parametrize("err", [errno.EACCES, errno.EIO, errno.EDQUOT])
def test_other_os_errors_name_the_file_and_folder(tmp_path, monkeypatch, capsys, old_and_new, err):
    template, old, _ = old_and_new
    parent = real(tmp_path)
    shutil.copytree(template, parent / "out")
    calls = _count_calls(tmp_path, monkeypatch, template, True)
    k = next(i for i, c in enumerate(calls, 1)       # the first write (or rename) of data.npz
             if c[0] in ("write", "replace", "rename") and c[1] is not None and "data.npz" in c[1].name)
    capsys.readouterr()
    with monkeypatch.context() as m:
        Faults(fail_at=k, err=err).install(m)
        code = main(["build", "--out", str(parent / "out"), "--quiet", *SMALL, "--seed", "2"])
    stderr = capsys.readouterr().err
    assert code == 2
    assert consistent_build(parent / "out") == old
    assert f"cannot write data.npz into {str(parent / 'out')!r}" in stderr and os.strerror(err) in stderr
    only(parent, "count", "out")


# --- SIGKILL at every point of a large publish --------------------------------------------------

SET_CODE = '''
import hashlib, json, random

LARGE = ("a.bin", "b.bin", "c.bin", "report.json")


def large_set(tag, sizes=((3 << 20) + 123, (5 << 19) + 7, (1 << 20) + 5)):
    """Multi-MB payloads and a report.json holding the sha256 of each of them."""
    rnd = random.Random(tag)
    files = {name: rnd.randbytes(size) for name, size in zip(LARGE, sizes)}
    files["report.json"] = json.dumps({n: hashlib.sha256(p).hexdigest() for n, p in files.items()}).encode()
    return files
'''
# One copy of the large set's definitions (LARGE, large_set, OLD, NEW) serves this process and
# the child script that kills itself mid-publish: it is run here and prepended to that script.
exec(SET_CODE)

KILL_SCRIPT = SET_CODE + textwrap.dedent('''
import os, shutil, signal, sys, traceback
from pathlib import Path
import construct.io as cio
from construct.io import OutputFolder

WATCH = ("open", "write", "fsync", "mkdir", "rename", "replace", "unlink", "rmdir")
root, mode = Path(sys.argv[1]), sys.argv[2]
OLD, NEW = large_set("old"), large_set("new")


def child(folder, k, logfile):
    """Publish NEW over folder, SIGKILLing this process at the k-th watched call (0: never)."""
    log, kill, me = [], os.kill, os.getpid()
    def wrap(name, fn):
        def call(*a, **kw):
            log.append(name)
            if len(log) == k:
                kill(me, signal.SIGKILL)
            return fn(*a, **kw)
        return call
    saved = {n: getattr(os, n) for n in WATCH}
    for n in WATCH:
        setattr(os, n, wrap(n, saved[n]))
    cio._exchange = wrap("exchange", cio._exchange if mode == "exchange" else (lambda a, b: False))
    shutil.rmtree = wrap("rmtree", shutil.rmtree)
    with OutputFolder(folder, LARGE) as out:
        out.publish(NEW)
    for n in WATCH:
        setattr(os, n, saved[n])
    Path(logfile).write_text(json.dumps(log))


def run(folder, k, logfile=os.devnull):
    folder.parent.mkdir(parents=True)
    with OutputFolder(folder, LARGE) as out:
        out.publish(OLD)
    pid = os.fork()
    if pid == 0:
        try:
            child(folder, k, logfile)
            code = 0
        except BaseException:
            traceback.print_exc()
            code = 3
        os._exit(code)
    return os.waitpid(pid, 0)[1]


result = {"count_status": run(root / "count" / "out", 0, root / "log.json")}
log = json.loads((root / "log.json").read_text())
ks = [int(k) for k in sys.argv[3:]] or range(1, len(log) + 1)
result["log"], result["status"] = log, {k: run(root / f"k{k}" / "out", k) for k in ks}
print(json.dumps(result))
''')


def large_state(folder, old, new):
    """'old' or 'new' if ``folder`` holds that complete set (hashes consistent); fails otherwise."""
    assert folder.is_dir(), f"{folder} is missing"
    assert sorted(os.listdir(folder)) == sorted(LARGE), f"{folder} holds {sorted(os.listdir(folder))}"
    report = json.loads((folder / "report.json").read_bytes())
    for name in LARGE[:-1]:
        assert report[name] == sha(folder / name), f"{folder}: report.json does not match {name}"
    got = {n: (folder / n).read_bytes() for n in LARGE}
    assert got in (old, new), f"{folder} holds a consistent set that is neither the old nor the new one"
    return "old" if got == old else "new"


def run_kill_script(root, mode, *ks, timeout=120):
    proc = subprocess.run([sys.executable, "-c", KILL_SCRIPT, str(root), mode, *map(str, ks)],
                          capture_output=True, text=True, env=subprocess_env(), timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_sigkill_at_every_point_of_a_large_publish(tmp_path):
    """A publish of ~7 MB in 1 MiB writes, SIGKILLed at each of its calls (every open, write,
    fsync, mkdir, rename, the swap, the removal of the old set, the lock's removal): the folder
    holds the complete old set up to the swap and the complete new set after it, never anything
    else; what the kill left is hidden, and the next run removes it."""
    root = real(tmp_path)
    res = run_kill_script(root, "exchange")
    assert res["count_status"] == 0, "the uninterrupted publish failed"
    log, status = res["log"], {int(k): s for k, s in res["status"].items()}
    assert len(status) >= 20 and sorted(status) == list(range(1, len(log) + 1)), log
    old, new = large_set("old"), large_set("new")
    states, hidden_left = {}, 0
    for k in sorted(status):
        where = f"killed at call {k} ({log[k - 1]}) of {log}"
        assert os.WIFSIGNALED(status[k]) and os.WTERMSIG(status[k]) == signal.SIGKILL, where
        parent = root / f"k{k}"
        folder = parent / "out"
        assert visible(parent) == ["out"], where
        try:
            states[k] = large_state(folder, old, new)
        except AssertionError as exc:
            raise AssertionError(f"{where}: {exc}") from None
        hidden = [n for n in os.listdir(parent) if n.startswith(".")]
        assert all(n.startswith(".out.mha-construct") for n in hidden), where
        hidden_left += any(n != ".out.mha-construct.lock" for n in hidden)
        # the next run: the leftovers are gone on entry, and a publish then works
        third = large_set(f"third {k}", sizes=(5000, 3, 0))
        with cio.OutputFolder(folder, LARGE) as out:
            only(parent, "out", ".out.mha-construct.lock")
            assert large_state(folder, old, new) == states[k], where
            out.publish(third)
        only(parent, "out")
        assert {n: (folder / n).read_bytes() for n in LARGE} == third
    order = [states[k] for k in sorted(states)]
    assert "old" in order and "new" in order and order == sorted(order, key=("old", "new").index), order
    assert hidden_left >= 10, "few kills left a staging folder: the kill points miss the writes"
    # the kill points span the whole publish, and the swap is the one step that changes the set
    assert log.count("write") >= 10 and "exchange" in log and "rmtree" in log, log
    assert order.index("new") == log.index("exchange") + 1, (order, log)


def test_sigkill_between_the_two_renames_of_the_fallback_keeps_a_set(tmp_path):
    """Where renameat2 is missing, publish renames the folder away, then the new set in: a kill
    between the two leaves no folder, the sets hidden. The next run must bring a complete set back
    (the old or the new one), not delete both."""
    root = real(tmp_path)
    res = run_kill_script(root, "fallback", 0)
    log = res["log"]
    renames = [i + 1 for i, n in enumerate(log) if n == "rename"]
    assert len(renames) == 2, log
    res = run_kill_script(root / "between", "fallback", renames[1])   # after the first rename
    parent = root / "between" / f"k{renames[1]}"
    assert os.WIFSIGNALED(res["status"][str(renames[1])])
    assert visible(parent) == [] or large_state(parent / "out", large_set("old"), large_set("new"))
    with cio.OutputFolder(parent / "out", LARGE):     # the next run, which then writes nothing
        pass
    assert large_state(parent / "out", large_set("old"), large_set("new")) in ("old", "new")


# --- end to end: a real build, killed -----------------------------------------------------------

def test_sigkill_of_a_real_build_leaves_a_complete_set(tmp_path):
    base = real(tmp_path)
    assert build(base / "old", *E2E, "--seed", "0") == (0, "")
    old = consistent_build(base / "old")
    t0 = time.perf_counter()
    done = subprocess.run(cli(base / "ref", *E2E, "--seed", "2"), env=subprocess_env(), capture_output=True)
    runtime = time.perf_counter() - t0
    assert done.returncode == 0, done.stderr
    new = consistent_build(base / "ref")
    assert new["weights.npz"] != old["weights.npz"]
    for i, fraction in enumerate((0.25, 0.5, 0.75, 0.9, 0.97, 1.03)):
        parent = base / f"run{i}"
        parent.mkdir()
        shutil.copytree(base / "old", parent / "out")
        proc = subprocess.Popen(cli(parent / "out", *E2E, "--seed", "2"), env=subprocess_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            proc.wait(timeout=runtime * fraction)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode in (0, -signal.SIGKILL), err
        got = consistent_build(parent / "out")
        which = [name for name, ref in (("old", old), ("new", new))
                 if all(got[n] == ref[n] for n in SET[:2])]
        assert which, f"run {i}: a consistent set that is neither the old nor the new build"
        assert visible(parent) == ["out"]
        with cio.OutputFolder(parent / "out", SET):   # the next run removes what the kill left
            pass
        only(parent, "out")
        assert consistent_build(parent / "out") == got


# --- two writers --------------------------------------------------------------------------------

def test_two_builds_into_one_folder_are_serialized_or_refused(tmp_path):
    """Two builds started together: each finishes or is refused by the lock; the folder then holds
    one complete set (interleaved files would break report.json's sha256, the data differ by seed)."""
    parent = real(tmp_path)
    for rnd in range(3):
        folder = parent / f"race{rnd}" / "out"
        if rnd % 2:                                    # over an existing set, and into a new folder
            assert build(folder, *SMALL, "--seed", "7") == (0, "")
        procs = [subprocess.Popen(cli(folder, *E2E, "--seed", seed), env=subprocess_env(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for seed in (3 + rnd, 10 + rnd)]
        outs = [p.communicate(timeout=120) for p in procs]
        codes = [p.returncode for p in procs]
        for code, (_, err) in zip(codes, outs):
            assert code == 0 or (code == 2 and LOCK_WORDS in err), (code, err)
        assert 0 in codes, outs
        consistent_build(folder)
        only(folder.parent, "out")


def test_a_locked_folder_is_refused_at_once(tmp_path, capsys, old_and_new):
    template, old, _ = old_and_new
    parent = real(tmp_path)
    shutil.copytree(template, parent / "out")
    with cio.OutputFolder(parent / "out", SET):
        code, err = build(parent / "out", *SMALL, "--seed", "2", capsys=capsys)
        assert code == 2 and LOCK_WORDS in err and str(parent / "out") in err, err
        assert consistent_build(parent / "out") == old
        # also a second writer in a subprocess
        proc = subprocess.run(cli(parent / "out", *SMALL, "--seed", "2"), env=subprocess_env(),
                              capture_output=True, text=True)
        assert proc.returncode == 2 and LOCK_WORDS in proc.stderr, proc.stderr
    assert consistent_build(parent / "out") == old
    only(parent, "out")
    # a lock file left by a killed writer holds nobody back
    (parent / ".out.mha-construct.lock").write_bytes(b"")
    assert build(parent / "out", *SMALL, "--seed", "2") == (0, "")
    only(parent, "out")


# --- folders the tool did not write ---------------------------------------------------------------

@pytest.mark.parametrize("foreign", ["cert.json", ".DS_Store", "notes"])
def test_a_folder_with_other_files_is_refused_without_force(tmp_path, capsys, old_and_new, foreign):
    template, old, new = old_and_new
    parent = real(tmp_path)
    folder = parent / "out"
    shutil.copytree(template, folder)
    if foreign == "notes":
        (folder / foreign).mkdir()
        (folder / foreign / "a.txt").write_text("mine")
    else:
        (folder / foreign).write_text('{"stale": true}')
    before = sorted(os.listdir(folder))
    code, err = build(folder, *SMALL, "--seed", "2", capsys=capsys)
    assert code == 2, err
    assert foreign in err and "--force" in err and str(folder) in err, err
    assert sorted(os.listdir(folder)) == before
    assert {n: sha(folder / n) for n in SET} == old
    only(parent, "out")
    code, err = build(folder, *SMALL, "--seed", "2", "--force", capsys=capsys)
    assert code == 0, err
    got = consistent_build(folder)                  # exactly the three files: the foreign one is gone
    assert all(got[n] == new[n] for n in SET[:2])
    only(parent, "out")


def test_a_failed_build_leaves_no_folder_it_made(tmp_path, capsys):
    """--out under folders that do not exist yet: a build refused for its input removes every
    folder it made for the output, the outer ones too."""
    top = real(tmp_path)
    (top / "bad.npz").write_bytes(b"not an archive")
    code, err = build(top / "a" / "b" / "c" / "out", top / "bad.npz", capsys=capsys)
    assert code == 2 and "bad.npz" in err, err
    only(top, "bad.npz")


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    parent = real(tmp_path)
    (parent / "out").write_bytes(b"precious")
    code, err = build(parent / "out", *SMALL, capsys=capsys)
    assert code == 2 and str(parent / "out") in err, err
    assert (parent / "out").read_bytes() == b"precious"
    only(parent, "out")


@pytest.mark.parametrize("name", ["out", "run [2]"])
def test_leftovers_of_a_killed_build_are_removed_by_the_next(tmp_path, capsys, name):
    parent = real(tmp_path)
    folder = parent / name
    assert build(folder, *SMALL, "--seed", "1") == (0, "")
    stage = parent / f".{name}.mha-construct-99999999-0badcafe"   # what a killed build leaves
    stage.mkdir()
    (stage / "weights.npz").write_bytes(b"half")
    (parent / f".{name}.mha-construct-99999999-old").mkdir()
    (parent / f".{name}.mha-construct.lock").write_bytes(b"")
    code, err = build(folder, *SMALL, "--seed", "2", capsys=capsys)
    assert code == 0, err
    consistent_build(folder)
    only(parent, name)


# --- write_atomic -------------------------------------------------------------------------------

def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("name", ["f.json", "f [1].json"])
def test_write_atomic_removes_the_temporaries_of_dead_writers(tmp_path, name):
    from construct.io import write_atomic

    target = tmp_path / name
    target.write_bytes(b"old")
    dead = tmp_path / f".{name}.{dead_pid()}.abcd.tmp"
    dead.write_bytes(b"half-written")
    alive = tmp_path / f".{name}.{os.getppid()}.beef.tmp"   # a live writer's: left alone
    alive.write_bytes(b"in progress")
    other = tmp_path / ".g.json.1.abcd.tmp"                 # another file's: left alone
    other.write_bytes(b"x")
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert not dead.exists()
    assert sorted(os.listdir(tmp_path)) == sorted([name, alive.name, other.name])



def test_write_atomic_writes_through_a_link_as_open_does(tmp_path):
    # A hostile trial: an output that is a symbolic link was replaced by a regular file, the
    # link's target left stale. `open(path, "wb")` and a shell's `>` write the target.
    from construct.io import write_atomic

    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "model.onnx"
    target.write_bytes(b"old")
    link = tmp_path / "model.onnx"
    link.symlink_to(target)
    write_atomic(link, b"new")
    assert link.is_symlink() and target.read_bytes() == b"new"
    dangling = tmp_path / "out.csv"
    dangling.symlink_to(tmp_path / "real" / "made.csv")             # as open() does: the target is made
    write_atomic(dangling, b"rows")
    assert dangling.is_symlink() and (tmp_path / "real" / "made.csv").read_bytes() == b"rows"
    nowhere = tmp_path / "lost.csv"
    nowhere.symlink_to(tmp_path / "absent" / "x.csv")               # no folder made through a link
    with pytest.raises(construct.InputError, match="lost.csv.*link.*absent"):
        write_atomic(nowhere, b"rows")
    assert not (tmp_path / "absent").exists() and nowhere.is_symlink()

def test_write_atomic_failure_keeps_the_old_file(tmp_path, monkeypatch):
    from construct.errors import OutputError
    from construct.io import write_atomic

    folder = real(tmp_path)
    target = folder / "f.json"
    target.write_bytes(b"old content")
    counter = Faults()
    with monkeypatch.context() as m:
        counter.install(m)
        write_atomic(folder / "g.json", b"x" * 3000)
    names = [c[0] for c in counter.calls]
    assert "write" in names and "fsync" in names and "replace" in names, names
    (folder / "g.json").unlink()
    for k in range(1, len(counter.calls) + 1):
        with monkeypatch.context() as m:
            faults = Faults(fail_at=k)
            faults.install(m)
            with pytest.raises(OutputError) as info:
                write_atomic(target, b"y" * 3000)
        msg = str(info.value)
        assert "f.json" in msg and str(folder) in msg and "No space left on device" in msg, (k, msg)
        assert target.read_bytes() == b"old content", k
        only(folder, "f.json")
    # a folder in the way of the file
    (folder / "d.json").mkdir()
    with pytest.raises(OutputError, match="d.json"):
        write_atomic(folder / "d.json", b"z")
    only(folder, "f.json", "d.json")


# --- names near the file system's limit ---------------------------------------------------------

def long_name(parent: Path, suffix: str) -> str:
    """A name of exactly the most bytes a name may have in ``parent`` (255 on most file systems),
    of two-byte characters where that fits, so that a cut in the middle of one would show."""
    room = os.pathconf(parent, "PC_NAME_MAX") - len(suffix.encode())
    return "é" * (room // 2) + "a" * (room % 2) + suffix


def test_names_at_the_file_systems_limit_are_written(tmp_path, capsys):
    # Left from a hostile trial: a valid name within about 25 bytes of the 255-byte limit failed
    # with "File name too long", because the hidden temporary beside it carries the name and more.
    from construct.io import check_file_target, write_atomic
    parent = real(tmp_path)
    name = long_name(parent, ".json")
    assert len(name.encode()) == os.pathconf(parent, "PC_NAME_MAX")
    check_file_target(parent / name, "--out")
    write_atomic(parent / name, b"one")
    write_atomic(parent / name, b"two")
    assert (parent / name).read_bytes() == b"two"
    only(parent, name)
    folder = parent / long_name(parent, "")
    assert build(folder, *SMALL, "--seed", "1") == (0, "")
    assert build(folder, *SMALL, "--seed", "2") == (0, "")          # the replacement goes through too
    consistent_build(folder)
    only(parent, name, folder.name)


def test_temporaries_of_long_names_are_swept_and_stay_apart(tmp_path):
    # Long names' temporaries carry a cut name and a digest of the whole: a dead writer's is still
    # swept, and two long names that share their first 200 bytes do not touch each other's.
    from construct.io import _stem, write_atomic
    parent = real(tmp_path)
    a, b = long_name(parent, ".a"), long_name(parent, ".b")
    assert _stem(a, parent) != _stem(b, parent) and _stem("short.json", parent) == "short.json"
    dead = parent / f".{_stem(a, parent)}.{dead_pid()}.0123abcd.tmp"
    dead.write_bytes(b"half")
    other = parent / f".{_stem(b, parent)}.{dead_pid()}.0123abcd.tmp"
    other.write_bytes(b"half")
    write_atomic(parent / a, b"x")
    assert not dead.exists() and other.exists()


def test_a_users_folder_beside_the_output_is_never_taken_for_a_leftover(tmp_path, capsys):
    # A hostile trial: `build --out res` removed every sibling named `.res.mha-construct-*`, a
    # build the user had kept as `.res.mha-construct-backup` included; and where `res` was
    # missing, a `.res.mha-construct-x-old` of theirs would have been renamed into `res`.
    parent = real(tmp_path)
    assert build(parent / ".res.mha-construct-backup", *SMALL, "--seed", "1") == (0, "")
    kept = consistent_build(parent / ".res.mha-construct-backup")
    theirs = parent / ".res.mha-construct-x-old"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    assert build(parent / "res", *SMALL, "--seed", "2", capsys=capsys) == (0, "")
    consistent_build(parent / "res")
    assert consistent_build(parent / ".res.mha-construct-backup") == kept
    assert (theirs / "notes.txt").read_text() == "mine"


def test_leftovers_under_the_lock_are_swept_whatever_their_process_id(tmp_path, monkeypatch):
    # A review: the sweep had begun to spare leftovers whose process id was alive. Under the lock
    # no other writer of the folder can be at work, and a process id is reused (PID 1 in every
    # container run): a killed run's staging folder stayed forever, and an old set named with
    # this process's id made every later publish fail where the folders are swapped by two renames.
    from construct.io import OutputFolder
    parent = real(tmp_path)
    monkeypatch.setattr(cio, "_exchange", lambda a, b: False)        # the two-rename fallback
    with OutputFolder(parent / "res", ["a"]) as out:
        out.publish({"a": b"1"})
    for leftover in (f".res.mha-construct-{os.getpid()}-old", f".res.mha-construct-{os.getpid()}-0badcafe",
                     ".res.mha-construct-1-deadbeef"):
        (parent / leftover).mkdir()
        (parent / leftover / "a").write_bytes(b"stale")
    with OutputFolder(parent / "res", ["a"]) as out:
        out.publish({"a": b"2"})
    assert (parent / "res" / "a").read_bytes() == b"2"
    only(parent, "res")
    for huge in (".res.mha-construct-99999999999999999999-old", ".w.json.99999999999999999999.ab.tmp"):
        (parent / huge).mkdir() if huge.endswith("-old") else (parent / huge).write_bytes(b"")
    with OutputFolder(parent / "res", ["a"]) as out:                 # (not ours: no pid is that large)
        out.publish({"a": b"3"})
    cio.write_atomic(parent / "w.json", b"{}")
    assert (parent / "res" / "a").read_bytes() == b"3" and (parent / "w.json").read_bytes() == b"{}"


def test_a_name_longer_than_the_file_system_allows_is_refused_by_name(tmp_path, capsys):
    # A hostile trial: names over 255 bytes gave a bare "error: [Errno 36] File name too long: …"
    # (build --out, export --out, teach --out, capacity --csv), or blamed the folder ("no file can
    # be made in '.'") for certify --out.
    parent = real(tmp_path)
    too_long = "a" * (os.pathconf(parent, "PC_NAME_MAX") + 1)
    for argv in (["build", "--out", parent / too_long, *SMALL],
                 ["build", "--out", parent / too_long / "run", *SMALL],
                 ["capacity", "--vary", "H", "--values", "1", "--context", "3", "--dim", "4",
                  "--csv", parent / f"{too_long}.csv"],
                 ["teach", "--out", parent / too_long]):
        code = main([str(a) for a in argv])
        err = capsys.readouterr().err
        assert code == 2 and "bytes" in err and "Errno" not in err and "at most" in err, err
    only(parent)


def test_a_file_system_that_states_no_name_limit_is_taken_at_255(tmp_path, monkeypatch):
    # A review: PC_NAME_MAX can be -1 (no limit stated) or 0 (some FUSE file systems); taken as
    # such, every name was refused and every hidden name cut to its digest.
    parent = real(tmp_path)
    for stated in (-1, 0):
        monkeypatch.setattr(cio.os, "pathconf", lambda path, name, stated=stated: stated)
        cio.check_names_fit(parent / "weights.npz", "--out")
        assert cio._stem("weights.npz", parent) == "weights.npz"
        cio.write_atomic(parent / "w.json", b"{}")
    monkeypatch.undo()
    only(parent, "w.json")


def test_save_refuses_the_current_folder_or_one_holding_it(tmp_path, monkeypatch):
    # A hostile trial: BuildResult.save(".") published over the current folder (the process was
    # left in a removed folder), and save("..", force=True) from par/child replaced all of par,
    # the child's notebook and par/notes.txt included; the CLI refuses both.
    parent = real(tmp_path) / "par"
    child = parent / "child"
    child.mkdir(parents=True)
    (parent / "notes.txt").write_text("mine")
    (child / "analysis.ipynb").write_text("{}")
    result = construct.build(construct.synthetic("independent", T=7, n=3, d=4, seed=0), 3)
    monkeypatch.chdir(child)
    for target, force in ((".", False), (".", True), ("..", True), (str(child), True)):
        with pytest.raises(construct.InputError, match="current folder or holds it"):
            result.save(target, force=force)
    assert (parent / "notes.txt").read_text() == "mine" and (child / "analysis.ipynb").read_text() == "{}"
    only(parent, "child", "notes.txt")
    only(child, "analysis.ipynb")


@pytest.mark.parametrize("planted", ["symlink", "folder"])
def test_a_lock_path_that_is_not_a_plain_file_is_refused_by_name(tmp_path, capsys, planted):
    # A hostile trial: a symlink planted at .NAME.mha-construct.lock was followed (build created
    # its target, mode 600: a classic plant in a shared /tmp when run as root), and a folder there
    # gave "cannot write lk …: Is a directory", which blamed the output folder.
    parent = real(tmp_path)
    lock = parent / ".lk.mha-construct.lock"
    target = parent / "planted_target"
    lock.symlink_to(target) if planted == "symlink" else lock.mkdir()
    code, err = build(parent / "lk", *SMALL, capsys=capsys)
    assert code == 2 and ".lk.mha-construct.lock" in err and "Traceback" not in err, err
    assert not target.exists() and not (parent / "lk").exists()


def test_a_rebuild_keeps_each_files_permissions(tmp_path, capsys):
    """From a hostile trial: a `chmod 444` weights.npz came back 0644 from a rebuild, where a
    file written over keeps its own permissions (single-file outputs do, and the folder does).
    Each file of the new set takes the mode of the file it replaces; a new name, the umask's."""
    import stat
    out = tmp_path / "run"
    assert main(["build", *SMALL, "--out", str(out), "--quiet"]) == 0
    (out / "weights.npz").chmod(0o444)
    (out / "report.json").chmod(0o600)
    default = stat.S_IMODE((out / "data.npz").stat().st_mode)
    assert main(["build", *SMALL, "--seed", "1", "--out", str(out), "--quiet"]) == 0
    modes = {name: stat.S_IMODE((out / name).stat().st_mode) for name in SET}
    assert modes == {"weights.npz": 0o444, "data.npz": default, "report.json": 0o600}
    capsys.readouterr()


def test_saving_a_build_from_python_replaces_a_certificate_as_the_command_line_does(tmp_path, capsys):
    """From a new user's walk through docs/own-data.md: after its shell steps (build, then
    certify --out run/certificate.json), its Python step `result.save("run")` was refused ("holds
    files this command does not write (certificate.json)"), where `mha-construct build --out run`
    replaces the certificate with the old set. save() now does as the command line does; other
    files are still refused, in words that fit Python too."""
    from construct import build, synthetic
    run = tmp_path / "run"
    assert main(["build", *SMALL, "--out", str(run), "--quiet"]) == 0
    assert main(["certify", str(run / "weights.npz"), str(run / "data.npz"), "--out", str(run / "certificate.json")]) == 0
    result = build(synthetic("independent", T=7, n=3, d=4, seed=5), 3)
    result.save(run)
    assert sorted(p.name for p in run.iterdir()) == sorted(SET)
    (run / "notes.txt").write_text("mine")
    with pytest.raises(construct.InputError, match=r"holds files a build does not write \(notes.txt\)"):
        result.save(run)
    capsys.readouterr()
