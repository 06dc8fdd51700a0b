"""``mha-construct``: build, verify, and check the assumptions, from the command line.

Exit codes: 0 success; 1 the weights do not memorize the data (verify; export, evaluated on a
dataset, in the written file), a claim is not proven (certify) or the construction failed
numerically (build); 2 bad input or usage. Errors go to stderr as one message, never a traceback,
and a failed build writes no file.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import math
import os
import re
import shlex
import signal
import stat
import sys
import textwrap
import threading
import time
from pathlib import Path

from ._version import __version__
from .errors import ConstructError, InputError, OutputError, listed
from .signals import signals_held

DEFAULT_PROBLEM = {"kind": "independent", "heads": 8, "context": 8, "dim": 16}


def _progress_printer(stream):
    """Progress on stderr: one updating line on a terminal, otherwise a line per tenth of the heads."""
    tty = stream.isatty()

    def show(done: int, total: int) -> None:
        if tty:
            end = "\n" if done == total else ""
            stream.write(f"\rbuilding: head {done}/{total}{end}")
            stream.flush()
        elif total >= 10 and (done * 10 // total) != ((done - 1) * 10 // total):
            stream.write(f"building: head {done}/{total}\n")
            stream.flush()
    return show


def _cmd_build(args) -> int:
    from .io import OutputFolder, as_path
    from .limits import tolerance
    from .report import summary_text

    tolerance(args.tol, "--tol")                   # named as the option, before any folder is touched
    as_path(args.out, "--out")
    _replaceable_folder(args.out, args.data)
    certificate = Path(args.out) / CERTIFICATE
    # The folder is locked before the work starts, so a second build into it is refused at once.
    with OutputFolder(args.out, OUTPUTS + (CERTIFICATE,), force=args.force) as out:
        stale = certificate.is_file()
        report = _build_into(args, out)
    if not args.quiet:
        print(summary_text(report))
        print(f"wrote        {Path(args.out) / 'weights.npz'}, data.npz, report.json")
        if stale:
            print(f"removed      {certificate}: it certified the weights this build replaced")
    return 0


# What build writes into its folder, as one set; and the certificate the docs write beside it,
# which a new build replaces with the rest (it certified the old weights).
OUTPUTS = ("weights.npz", "data.npz", "report.json")
CERTIFICATE = "certificate.json"


def _replaceable_folder(out: Path, data: Path | None) -> None:
    """Refuse an --out folder that build cannot replace as a whole without harm: a folder holding
    the input data file anywhere but as its own ``data.npz`` (which build rewrites with the same
    dataset): under one of build's other names it would be replaced, under any other name
    removed with the rest of the folder by --force (or refused as a foreign file without it).
    (The current folder or one holding it is refused by :class:`~construct.io.OutputFolder`, for
    the Python API too.)"""
    folder = Path(os.path.realpath(out))
    if data is not None:
        source = Path(os.path.realpath(data))
        if folder in source.parents and not (source.parent == folder and source.name == "data.npz"):
            raise InputError(f"--out {str(out)!r} holds the input {str(data)!r}, which the build would replace or "
                             "remove with the rest of the folder; write into another folder",
                             what="invalid output folder")


def _not_an_input(out: Path, **inputs: Path | None) -> None:
    """Refuse an --out that names one of the command's input files (the same file, by any path)."""
    for label, path in inputs.items():
        if path is None:
            continue
        try:
            same = os.path.samefile(out, path)
        except OSError:                              # one of them does not exist (yet)
            same = os.path.realpath(out) == os.path.realpath(path)
        if same:
            raise InputError(f"--out {str(out)!r} is an input ({label} {str(path)!r}): writing it would replace "
                             "what it is made from; nothing was written", what="invalid arguments")


_EXPORT_NAMES = {"torch": "model.pt", "safetensors": "model.safetensors", "onnx": "model.onnx"}


def _not_a_build_file(out: Path, *inputs: Path | None, instead: str = CERTIFICATE, label: str = "--out") -> None:
    """Refuse an output (option ``label``) that names one of the files build writes as one set
    (weights.npz, data.npz, report.json), present in the folder of one of the command's inputs
    or in a folder that holds a build's files (its report.json beside its weights or data): it
    would replace a file of the build's set (a certificate written over run/report.json, an
    export over run/data.npz), and report.json would no longer name the files beside it. Where
    no such file is there, nothing of a build is replaced. ``instead``: the file name the
    refusal suggests (the command's own kind of file)."""
    target = Path(os.path.realpath(out))
    if target.name not in OUTPUTS or not target.exists():
        return
    suggestion = f"name another file ({str(Path(out).parent / instead)!r}, say)"
    for path in inputs:
        if path is not None and Path(os.path.realpath(path)).parent == target.parent:
            raise InputError(f"{label} {str(out)!r} names {target.name}, one of the files build writes as one set "
                             f"({', '.join(OUTPUTS)}), in the folder of the input {str(path)!r}: writing it there "
                             f"would replace the {target.name} there; {suggestion}", what="invalid arguments")
    folder = target.parent
    if (folder / "report.json").is_file() and any((folder / name).is_file() for name in OUTPUTS[:2]):
        raise InputError(f"{label} {str(out)!r} names {target.name} in a folder that holds a build's files "
                         f"({', '.join(OUTPUTS)}): writing it there would replace one of them; {suggestion}",
                         what="invalid arguments")


def _build_into(args, out) -> dict:
    from .build import build, capacity, heads_needed
    from .data import load_dataset, synthetic
    from .io import json_bytes, sha256
    from .report import build_report

    started = time.perf_counter()
    synthetic_only = {"--context": args.context, "--dim": args.dim, "--examples": args.examples,
                      "--out-dim": args.out_dim, "--positional": args.positional or None}
    if args.dataset is not None:
        from . import datasets
        problems = [f"{flag} cannot be given with --dataset" for flag, given in
                    (("a data file", args.data), ("--synthetic", args.synthetic), ("--context", args.context),
                     ("--dim", args.dim), ("--out-dim", args.out_dim), ("--positional", args.positional or None))
                    if given is not None]
        if problems:
            raise InputError(problems, what="invalid arguments")
        if args.dataset == "digits" and args.examples is not None and args.examples > datasets.DIGITS:
            raise InputError(f"--examples {args.examples} exceeds the {datasets.DIGITS} digits there are",
                             what="invalid option")
        options = {} if args.examples is None else {"count": args.examples}
        if args.dataset == "tokens":
            options["seed"] = args.seed
        data = datasets.load(args.dataset, **options)
        heads = args.heads or heads_needed(data.T, min(data.n, args.head_dim or data.n)) or 1
        source = {"source": f"dataset {args.dataset}", "dataset": {"name": args.dataset, "T": data.T,
                                                                   "classes": list(data.classes or ())}}
        if not args.quiet:
            print(datasets.describe(data))
    elif args.data is not None:
        problems = []
        if args.synthetic is not None:
            problems.append("give a data file or --synthetic, not both")
        problems += [f"{flag} applies to synthetic problems only, not to a data file"
                     for flag, v in synthetic_only.items() if v is not None]
        if problems:
            raise InputError(problems, what="invalid arguments")
        data = load_dataset(args.data)
        _note_integer_targets(args.data)
        if (os.path.realpath(args.data) == os.path.join(os.path.realpath(args.out), "data.npz")
                and Path(args.data).read_bytes() != data.to_bytes()):
            raise InputError(f"--out {str(args.out)!r} would replace the input {str(args.data)!r} with the dataset as "
                             "build writes it (float64 arrays, Y one-hot for integer labels), which differs from "
                             "the file: write into another folder", what="invalid output folder")
        heads = args.heads
        if heads is None:
            d_h = args.head_dim or data.n
            heads = heads_needed(data.T, min(data.n, d_h)) or 1
        source = {"source": os.fsencode(args.data).decode("utf-8", "backslashreplace")}   # valid text
        if data.classes is not None:                 # integer labels: the id of each column of Y
            source["classes"] = list(data.classes)
    else:
        kind = args.synthetic or DEFAULT_PROBLEM["kind"]
        heads = args.heads or DEFAULT_PROBLEM["heads"]
        n = args.context or DEFAULT_PROBLEM["context"]
        d = args.dim or DEFAULT_PROBLEM["dim"]
        d_h = args.head_dim or n
        T = args.examples or capacity(heads, n, d_h)
        from .arith.gpu import resolve
        if resolve(args.device).name == "cpu":     # sized as build sizes it, before its data is drawn
            from types import SimpleNamespace

            from .limits import require_memory
            from .validate import memory_estimate
            d_o = args.out_dim or 1
            require_memory(memory_estimate(SimpleNamespace(T=T, n=n, d=d, d_o=d_o), heads, d_h,
                                           args.value_dim or d_o),
                           f"a build of T = {T} examples (n = {n}, d = {d}) with H = {heads} heads")
        data = synthetic(kind, T=T, n=n, d=d, d_o=args.out_dim or 1, seed=args.seed,
                         positional=args.positional)
        source = {"source": f"synthetic {kind}", "synthetic": {"kind": kind, "T": T, "n": n, "d": d,
                                                               "d_o": data.d_o, "seed": args.seed,
                                                               "positional": args.positional}}
    if not args.quiet:
        _announce_mpmath_size(data, heads, args.head_dim, args.precision)
    progress = None if args.quiet or sys.stderr is None else _progress_printer(sys.stderr)   # None: 2>&-
    result = build(data, heads, head_dim=args.head_dim, value_dim=args.value_dim, skip=args.skip,
                   seed=args.seed, tol=args.tol, scale=args.scale, precision=args.precision, progress=progress,
                   device=args.device, prelayer=args.prelayer)
    weights_bytes, data_bytes = result.weights.to_bytes(), data.to_bytes()
    report = build_report(result, data_source=source, data_sha256=sha256(data_bytes),
                          weights_sha256=sha256(weights_bytes), total_seconds=time.perf_counter() - started)
    out.publish({"weights.npz": weights_bytes, "data.npz": data_bytes, "report.json": json_bytes(report)})
    return report


def _announce_mpmath_size(data, heads: int, head_dim, precision: str) -> None:
    """An explicit mpmath precision runs at any size; beyond the size at which auto would use it,
    say so before a run that can take hours. A bad value is left to ``build`` to refuse."""
    from .policy import mpmath_size
    from .precision import parse
    try:
        chosen = parse(precision)
    except ValueError:
        return
    if chosen == "auto" or chosen.is_float64:
        return
    beyond = mpmath_size(data, heads, head_dim)
    if beyond is not None:
        print(f"mha-construct build: note: mpmath at {chosen.bits} bits on a problem {beyond}; its time grows "
              "faster than that count, so expect a long run (Ctrl-C stops it and writes nothing)",
              file=sys.stderr)


def _device_option(parser) -> None:
    from .arith.gpu import DEVICES
    parser.add_argument("--device", choices=DEVICES, default="cpu",
                        help="where float64 runs: cpu (default), gpu (CuPy, the [gpu] extra; an error if no "
                             "GPU can be used) or auto (the GPU when one can be used); the output says which ran")


def _cmd_verify(args) -> int:
    from .data import load_dataset
    from .io import json_bytes
    from .model import load_weights
    from .limits import tolerance
    from .report import float64_line
    from .verify import OVERFLOW_FALLBACK, verify

    tolerance(args.tol, "--tol")                   # a bad option is refused before any file is read
    weights = load_weights(args.weights)
    data = load_dataset(args.data)
    data = _in_the_builds_classes("verify", Path(args.weights), data)
    v = verify(weights, data, tol=args.tol, device=args.device)
    if args.json:
        print(json_bytes(v.to_dict()).decode(), end="")          # strict JSON: null for inf and NaN
    else:
        finite = math.isfinite(v.sigma_min_Z)
        print(f"device       {v.device}: {v.device_reason}\n"
              f"examples     T = {v.T}\nrank Z       "
              + (f"{v.rank_Z}   sigma_min(Z) = {v.sigma_min_Z:.3e}\n" if finite else
                 "not computed: Z is not finite (the logits overflow float64)\n")
              + f"max |f - y|  {v.max_abs_error:.3e}  (allowed {v.tol:.1e}; outputs in {v.outputs})\n"
              + (float64_line(v.float64_error, v.tol) + "\n" if v.float64_error is not None else "")
              + ("PASS: every label reproduced, rank Z = T" if v.passed else
                 "FAIL: " + ("the features are not finite" if not finite else
                             "the double words overflowed on some examples, where float64's rounding shows; "
                             "float64's measure above cannot settle them" if v.outputs.endswith(OVERFLOW_FALLBACK)
                             and v.rank_Z == v.T else
                             "labels not reproduced within the tolerance" if not v.max_abs_error <= v.tol
                             else f"rank Z = {v.rank_Z} < T = {v.T}")))
    return 0 if v.passed else 1


def _cmd_export(args) -> int:
    from .data import load_dataset
    from .export import export
    from .io import check_file_target
    from .limits import tolerance
    from .model import load_weights

    if args.tol is not None:                       # named as the option, before any file is read
        tolerance(args.tol, "--tol")
    beside = Path(args.weights).parent
    data_file = args.data if args.data is not None else (beside / "data.npz" if (beside / "data.npz").is_file() else None)
    if args.tol is not None and data_file is None:   # an option with nothing to apply to is refused, not ignored
        raise InputError(f"--tol is the tolerance of the check on a dataset, and there is none: give --data "
                         f"(no data.npz lies beside {str(args.weights)!r}), or leave --tol out",
                         what="invalid arguments")
    weights = load_weights(args.weights)
    report = beside / "report.json"
    _not_an_input(args.out, weights=args.weights, data=data_file, report=report if report.is_file() else None)
    _not_a_build_file(args.out, args.weights, data_file, instead=_EXPORT_NAMES[args.format])
    check_file_target(args.out, "--out")
    data = load_dataset(data_file) if data_file is not None else None
    if data is not None:
        data = _in_the_builds_classes("export", Path(args.weights), data)
    linked, unlinked = _report_of(report, Path(args.weights))
    info = export(weights, args.format, args.out, dtype=args.dtype, data=data, tol=args.tol, report_sha256=linked)
    print(f"wrote        {info['path']} ({info['format']}, {info['dtype']})")
    if unlinked:
        print(f"report       {report} describes other weights (or cannot be read): not linked in the export")
    if data is None:
        print("checked      not evaluated (no dataset: give --data)")
    else:
        print(f"checked      on {data_file} in the target library: max |f - y| = {info['max_abs_error']:.3e} "
              f"(allowed {info['allowed']:.1e}): "
              + ("every label holds" if info["labels_hold"] else "the labels do NOT all hold at this dtype"))
    return 0 if data is None or info["labels_hold"] else 1


def _cmd_certify(args) -> int:
    from .certify import CLAIMS, MAX_CERTIFICATE_BYTES, Certificate, check_certificate, certify, read_certificate
    from .data import load_dataset
    from .io import check_file_target, file_sha256, folder_lock
    from .limits import tolerance
    from .model import load_weights
    from .verify import DEFAULT_TOL

    def progress(note: str) -> None:
        print(f"mha-construct certify: {note}", file=sys.stderr, flush=True)

    if args.check is not None:
        clash = [flag for flag, given in (("--out", args.out), ("--tol", args.tol), ("--method", args.method))
                 if given is not None]
        if clash:
            raise InputError(f"{', '.join(clash)} cannot be given with --check: the certificate states its own "
                             "method and tolerance, and --check writes nothing", what="invalid arguments")
        try:
            # Without blocking (a FIFO with no writer), a regular file only (a device's size is 0
            # and /dev/zero never ends), and never more than a certificate can hold.
            fd = os.open(args.check, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    raise InputError(f"{args.check}: not a regular file", what="invalid certificate")
                text = f.read(MAX_CERTIFICATE_BYTES + 1)
            if len(text) > MAX_CERTIFICATE_BYTES:
                raise InputError(f"{args.check}: larger than a certificate can be", what="invalid certificate")
        except OSError as exc:
            raise InputError(f"{args.check}: cannot be read ({exc.strerror or exc})", what="invalid certificate")
        cert = read_certificate(text)
        weights, data = load_weights(args.weights), load_dataset(args.data)
        data = _in_the_builds_classes("certify", Path(args.weights), data)   # as certify read them
        problems = check_certificate(cert, weights, data, progress=progress)
        if problems:
            print("certificate REJECTED:\n  " + "\n  ".join(listed(problems)))
            return 1
        # What was proven again, and at which tolerance: a certificate issued at --tol 1 holds too.
        print(f"certificate ACCEPTED: every field is proven again for these files (issued at --tol "
              f"{cert['tol']:g}, |f - y| allowed up to {cert['allowed']:g})")
        print("\n".join(Certificate(cert, passed=all(cert[k]["proven"] for k in CLAIMS if k in cert)).lines()))
        return 0
    tol = tolerance(DEFAULT_TOL if args.tol is None else args.tol, "--tol")
    inputs, folder, before = (Path(args.weights), Path(args.data)), None, None
    if args.out is not None:
        _not_an_input(args.out, weights=args.weights, data=args.data)
        _not_a_build_file(args.out, args.weights, args.data)
        check_file_target(args.out, "--out")          # before the work, not after it
        # Beside its inputs (a build's folder), the certificate is written under that folder's
        # lock, and only if the inputs are still the files certified: a build into the folder
        # meanwhile would otherwise leave a certificate of the old weights beside the new ones.
        here = Path(os.path.realpath(Path(args.out).parent))
        if any(Path(os.path.realpath(p)).parent == here for p in inputs):
            folder, before = here, [file_sha256(p) for p in inputs]
    weights, data = load_weights(args.weights), load_dataset(args.data)
    data = _in_the_builds_classes("certify", Path(args.weights), data)
    result = certify(weights, data, tol=tol, method=args.method or "auto",
                     progress=progress)
    lines = result.lines()
    if args.out is not None:
        with folder_lock(folder) if folder is not None else contextlib.nullcontext():
            if folder is not None and [file_sha256(p) for p in inputs] != before:
                raise InputError(f"{args.weights} or {args.data} changed while certifying (a build into "
                                 f"{str(folder)!r}?): no certificate written; certify the files as they are now",
                                 what="inputs changed")
            result.save(args.out)
        again = shlex.join(["mha-construct", "certify", str(args.weights), str(args.data), "--check", str(args.out)])
        lines.append(f"wrote          {args.out}: the certificate (JSON; check it with `{again}`)")
    print("\n".join(lines))
    return 0 if result.passed else 1


# A build's report.json is far smaller (about 0.3 MB at H = 512); one larger is not one of its.
MAX_REPORT_BYTES = 64 << 20


def _report_of(report: Path, weights: Path) -> tuple[str | None, bool]:
    """``(sha256 of report.json, False)`` where that report describes these weights (its
    ``weights_sha256`` is theirs), ``(None, True)`` where one lies there and does not (another
    build's, or unreadable), ``(None, False)`` where there is none."""
    import json

    from .io import sha256
    if not report.is_file():
        return None, False
    try:
        if report.stat().st_size > MAX_REPORT_BYTES:       # not one the engine wrote: never read whole
            return None, True
        payload = report.read_bytes()
        described = json.loads(payload).get("weights_sha256")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None, True
    return (sha256(payload), False) if described == sha256(weights.read_bytes()) else (None, True)


def _note_integer_targets(path) -> None:
    """A note on standard error where a data file's ``Y`` is one column of integers: class ids,
    most likely, which the build memorizes as numbers on one output; ``labels`` makes them one-hot
    targets (the file has been read and checked already)."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as f:
            Y = f["Y"] if "Y" in f.files else None
    except (OSError, ValueError):
        return
    if Y is not None and Y.dtype.kind in "iu" and Y.ndim == 1:
        print("mha-construct build: note: Y holds integers (T,): they are memorized as numbers, on one output; "
              "class ids go in an array named 'labels' instead (one-hot targets, one output per class)",
              file=sys.stderr)


def _in_the_builds_classes(command: str, weights: Path, data):
    """``data`` with its integer labels' targets in the columns of the classes the build of
    these weights had (as its report.json beside them records), where every id of the labels is
    one of those: a part of the training set, say, whose own one-hot targets would have only the
    columns of the classes it holds. Otherwise ``data`` as it is, with a note on standard error
    where its class ids are not the build's.

    The weights hold no class ids: output column ``j`` is the ``j``-th class of the build in
    sorted order. Labels of other ids (5, 6, 7 for a build's 0, 1, 2) give targets in their own
    sorted order, and the check compares those columns; a user who maps columns back to ids
    with the build's list would read other classes.
    """
    import json

    import numpy as np

    from .data import Dataset, checked

    report = weights.parent / "report.json"
    if data.classes is None or _report_of(report, weights)[0] is None:
        return data
    try:
        described = json.loads(report.read_bytes()).get("data")
        built = described.get("classes", (described.get("dataset") or {}).get("classes"))
    except (OSError, ValueError, AttributeError, RecursionError):
        return data
    if (not isinstance(built, list) or not all(type(c) is int for c in built)   # noqa: E721 (not bool)
            or built == list(data.classes)):
        return data
    if set(data.classes) <= set(built):
        column = {c: j for j, c in enumerate(built)}
        Y = np.zeros((data.T, len(built)))
        Y[:, [column[c] for c in data.classes]] = data.Y
        print(f"mha-construct {command}: note: the dataset's labels hold classes {list(data.classes)} of the "
              f"{built} these weights were built on ({report}): their targets take the build's columns",
              file=sys.stderr)
        return checked(Dataset(data.E, data.X, Y, classes=tuple(built)))
    print(f"mha-construct {command}: note: the dataset's class ids {list(data.classes)} are not those these weights "
          f"were built on ({built}, {report}); the check compares output columns (column j = the j-th class "
          "in sorted order), so it reads the dataset's ids in place of the build's", file=sys.stderr)
    return data


def _cmd_teach(args) -> int:
    from .io import check_file_target, write_atomic_many
    from .teach import teach

    if args.context > args.dim:                # the build's own message names the array E, not the options
        raise InputError(f"--context {args.context} exceeds --dim {args.dim}: context size n = {args.context} "
                         f"exceeds token dimension d = {args.dim}; A2 needs n ≤ d", what="invalid option")
    out = None if args.out is None else Path(args.out)
    name = {"html": "teach.html", "markdown": "teach.md", "text": "teach.txt"}[args.format]
    if out is not None:
        check_file_target(out / name, "--out")            # before the walk, not after it
    walk = teach(args.heads, args.context, args.dim, seed=args.seed, shared=args.shared, rational=args.rational,
                 prelayer=args.prelayer)
    # Markdown links its figures as SVG files beside it: only where there is a folder to write them.
    figures = walk.figure_names() if args.format == "markdown" and out is not None else []
    for target in ([] if out is None else [out / f for f in figures] + [out / name]):
        check_file_target(target, "--out")                # every file, before the first is written
    if args.format == "html":
        payload = walk.html()
    elif args.format == "markdown":
        payload = walk.markdown(figures if out is not None else None)
    else:
        # Styled only on a terminal, and not where NO_COLOR is set to anything (no-color.org).
        payload = walk.text(color=out is None and sys.stdout is not None and sys.stdout.isatty()   # None: >&-
                            and not os.environ.get("NO_COLOR"))
    if out is None:
        print(payload, end="")
        return 0
    # The page and its figures as one set: none is written unless all can be.
    write_atomic_many([*((out / f, svg.encode()) for f, svg in zip(figures, walk.figures)),
                       (out / name, payload.encode())])
    if args.format == "markdown":                         # an earlier, longer page's figures: unlinked now
        for old in out.glob("teach-figure-*.svg"):
            if (old.name not in figures and re.fullmatch(r"teach-figure-[1-9][0-9]*\.svg", old.name)
                    and old.is_file() and not old.is_symlink()):
                try:
                    old.unlink()
                except OSError as exc:                    # the page is written: a note, not a failure
                    print(f"mha-construct teach: could not remove {old}, a figure of an earlier page "
                          f"({exc.strerror or exc})", file=sys.stderr)
    shown = {"html": f"{len(walk.figures)} figures inline",
             "markdown": f"{len(figures)} figures linked",
             "text": "no figures: see --format html, or --format markdown with --out"}[args.format]
    print(f"wrote {out / name} ({len(walk.steps)} steps, {shown})")
    for fig_name in figures:
        print(f"wrote {out / fig_name}")
    return 0


def _cmd_assumptions(args) -> int:
    import json

    from .assumptions import assumptions_text, check_assumptions
    from .data import load_dataset

    rep = check_assumptions(load_dataset(args.data), trials=args.trials, seed=args.seed)
    print(json.dumps(rep.to_dict(), indent=2) if args.json else assumptions_text(rep))
    return 0 if args.report_only or rep.passed else 1


def _cmd_capacity(args) -> int:
    import importlib.util

    from .io import check_file_target, write_atomic_many
    from .sweeps import PLOT_SUFFIXES, SWEPT_AT, plot_bytes, sweep, to_csv, to_json

    twice = [f"--{flag} {v} is given twice" for flag, given in (("kind", args.kind), ("values", args.values))
             for i, v in enumerate(given) if v in given[:i]]
    if twice:
        raise InputError(twice, what="invalid arguments")
    # The swept quantity's own option would be ignored (--values gives it): refused, not dropped.
    option, given = {"H": ("--heads", args.heads), "n": ("--context", args.context),
                     "d_h": ("--head-dim", args.head_dim)}[args.vary]
    if given is not None:
        raise InputError(f"{option} {given} cannot be given with --vary {args.vary}: --values gives {args.vary}",
                         what="invalid arguments")
    heads = SWEPT_AT["H"] if args.heads is None else args.heads
    context = SWEPT_AT["n"] if args.context is None else args.context
    dim = SWEPT_AT["d"] if args.dim is None else args.dim
    # Every file the command will write, as it will name them: with several kinds, a plot per kind.
    plots = [(path, kind, path if len(args.kind) == 1 else path.with_name(f"{path.stem}-{kind}{path.suffix}"))
             for path in args.plot or [] for kind in args.kind]
    written = [(flag, p) for flag, p in (("--csv", args.csv), ("--json", args.json),
                                         *(("--plot", target) for _, _, target in plots)) if p is not None]
    for i, (flag, path) in enumerate(written):
        twin = next((f for f, q in written[:i] if os.path.realpath(q) == os.path.realpath(path)), None)
        if twin is not None:
            raise InputError(f"{str(path)!r} is given to {twin} and {flag}: each output needs its own file",
                             what="invalid arguments")
        _not_a_build_file(path, instead=f"capacity{path.suffix}", label=flag)
        check_file_target(path, flag)
    odd = [str(p) for p in args.plot or [] if p.suffix.lower() not in PLOT_SUFFIXES]
    if odd:                                                               # before the sweep, not after
        raise InputError(f"--plot {', '.join(odd)}: a plot is written as .svg or .png", what="invalid option")
    if args.plot and importlib.util.find_spec("matplotlib") is None:     # before the sweep, not after
        from .limits import missing_library
        raise missing_library("plots need matplotlib", "plot")
    if args.vary != "n" and context > dim:            # the sweep's own message names n and d
        raise InputError(f"--context {context} exceeds --dim {dim}: contexts of n tokens in d "
                         "dimensions need n ≤ d (A2)", what="invalid option")

    header = [f"{'kind':<12} {'H':>4} {'n':>4} {'d':>4} {'d_h':>4} {'bound':>6} {'certified':>9} {'generic rank':>14} "
              f"{'seconds':>7}"]

    def show(r: dict) -> None:
        if header:                                      # with the first row: not above a refusal
            print(header.pop())
        print(f"{r['kind']:<12} {r['H']:>4} {r['n']:>4} {r['d']:>4} {r['d_h']:>4} {r['bound']:>6} {r['certified']:>9} "
              f"{r['generic_rank']:>5} of {r['generic_T']:<5} {r['seconds']:>7.2f}", flush=True)
        if r.get("failure"):
            print(f"mha-construct capacity: note: {args.vary} = {r[args.vary]} ({r['kind']}): the construction "
                  f"failed, certified 0: {r['failure']}", file=sys.stderr, flush=True)

    rows = []
    for kind in args.kind:
        rows += sweep(args.vary, args.values, kind=kind, H=heads, n=context, d=dim,
                      d_h=args.head_dim, seed=args.seed, progress=show)
    # Every output as one set: none is written unless all can be.
    files = [*([(args.csv, to_csv(rows).encode())] if args.csv else []),
             *([(args.json, to_json(rows).encode())] if args.json else []),
             *((target, plot_bytes([r for r in rows if r["kind"] == kind], args.vary, target.suffix))
               for _, kind, target in plots)]
    write_atomic_many(files)
    for path, _ in files:
        print(f"wrote        {path}")
    return 0


def _path(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path names no file or folder")
    if text == "-":                   # the usual spelling of standard input or output, which no option reads or writes
        raise argparse.ArgumentTypeError("'-': this command reads and writes files, not standard input or output; "
                                         "name the file (./- for a file named -)")
    return Path(text)


def _file(text: str) -> Path:
    """:func:`_path` for an option that names a file: a path ending in a separator, ``.`` or
    ``..`` names a folder (``Path`` would drop the slash, and ``keep/`` replace the file ``keep``)."""
    path = _path(text)
    seps = tuple(filter(None, (os.sep, os.altsep)))
    if text.endswith(seps) or os.path.basename(text) in (".", ".."):
        raise argparse.ArgumentTypeError(f"{text!r} names a folder (it ends in {text[-1]!r}); name a file")
    return path


def _digits(text: str, least: int, meaning: str) -> int:
    """An integer of ASCII digits, at least ``least``: Python's ``int`` would also take ``1_0``,
    spaces around it, a sign and other scripts' digits, which an option refuses, never coerces."""
    shown = text if len(text) <= 40 else f"{text[:20]}…{text[-10:]} ({len(text)} characters)"
    try:
        if not (text.isascii() and text.isdigit()) or int(text) < least:
            raise ValueError
        return int(text)
    except ValueError:                       # also beyond Python's limit of 4,300 digits
        raise argparse.ArgumentTypeError(f"must be {meaning}, got {shown!r}") from None


def _number(text: str) -> float:
    """A number as ``float`` reads it, but of ASCII characters, without ``_`` or spaces around it
    (``float`` would take those too); NaN and infinities are refused later, naming the option."""
    try:
        if not text.isascii() or "_" in text or text != text.strip():
            raise ValueError
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text[:40]!r}") from None
    # Beyond float64's range float() gives 0 or inf, and a later message would show that, not
    # what was typed.
    mantissa = re.split("[eE]", text)[0]
    if value == 0 and re.search("[1-9]", mantissa):
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is below float64's range (it rounds to 0)")
    if math.isinf(value) and "inf" not in text.lower():
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is beyond float64's range (it rounds to inf)")
    return value


def _seed(text: str) -> int:
    return _digits(text, 0, "an integer ≥ 0")


def _precision(text: str) -> str:
    """Checked here so that the error names the option; the text itself goes on to build."""
    from .precision import MAX_BITS, parse
    if len(text) > 40:                              # (and int() stops at 4,300 digits)
        raise argparse.ArgumentTypeError(f"must be auto, float64 or a number of bits up to {MAX_BITS}, got "
                                         f"{text[:20]!r}… ({len(text)} characters)")
    try:
        parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("precision ")) from None
    return text


def _positive(text: str) -> int:
    return _digits(text, 1, "a positive integer")


class _StoreOnce(argparse.Action):
    """argparse's ``store``, except that an option given twice is refused (argparse keeps the
    last: ``--heads 3 --heads 2`` would build with 2 heads without a word)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string is not None:                   # a positional argument comes once by position
            given = namespace.__dict__.setdefault("_given", set())
            if self.dest in given:
                parser.error(f"{option_string} is given twice; give it once")
            given.add(self.dest)
        setattr(namespace, self.dest, values)


class _Parser(argparse.ArgumentParser):
    """An argument parser (its subcommands' too) whose options taking a value are given once."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)

    def parse_args(self, args=None, namespace=None):
        """argparse's, except that arguments no parser took are refused by the subcommand's parser
        (its usage, not the top level's), each mistyped option with the closest it has."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            commands = getattr(self, "commands", {})
            where = commands.get(getattr(parsed, "command", None), self)
            options = [o for action in where._actions for o in action.option_strings if o.startswith("--")]
            hints = [(name, close[0]) for name in (t.split("=")[0] for t in extra if t.startswith("-"))
                     for close in [difflib.get_close_matches(name, options, n=1)] if close]
            said = ("; ".join(f"{name}: did you mean {close}?" for name, close in hints) if len(hints) > 1 else
                    "".join(f"did you mean {close}?" for _, close in hints))
            where.error(f"unrecognized arguments: {' '.join(extra)}" + (f" ({said})" if said else ""))
        return parsed

    def _print_message(self, message, file=None):
        """argparse's, except that a failed write of ``--help`` or ``--version`` to standard
        output (a full disk) is raised rather than passed over: the command exits 0 otherwise."""
        if message and file is not None and file is sys.stdout:
            try:
                file.write(message)
                file.flush()
            except OSError as exc:
                raise _HelpNotWritten(exc) from None
        else:
            super()._print_message(message, file)


class _HelpNotWritten(Exception):
    """``--help`` or ``--version`` could not be written to standard output (the OSError as its argument)."""


def _parser() -> argparse.ArgumentParser:
    from .build import PRELAYER_OPTIONS, SCALES
    from .certify import METHODS
    from .data import SYNTHETIC_KINDS
    from .verify import DEFAULT_TOL

    p = _Parser(prog="mha-construct",
                description="Build certified memorizing weights for single-layer multi-head attention (Theorem 1 "
                            "of Mahdavi, Liao & Thrampoulidis, ICLR 2024).")
    p.add_argument("--version", action="version", version=f"mha-construct {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    p.commands = sub.choices                     # name → the subcommand's parser (parse_args)

    b = sub.add_parser("build", help="construct weights that memorize a dataset",
                       description="Construct weights that memorize DATA (or a synthetic problem). With no "
                                   "data and no --synthetic: the default problem, independent contexts, "
                                   "H = 8, n = 8, d = 16, T = 57.")
    b.add_argument("data", nargs="?", type=_path, help=".npz with E (T,n,d), X (T,d), Y (T,d_o)")
    b.add_argument("--heads", type=_positive, help="H (default: 8 for synthetic data, else the fewest that suffice)")
    b.add_argument("--head-dim", type=_positive, help="d_h (default n)")
    b.add_argument("--value-dim", type=_positive, help="d_v (default d_o)")
    b.add_argument("--skip", action="store_true", help="skip connection: f = W_D^T(x + W_O^T[...]) (App. C)")
    b.add_argument("--prelayer", choices=PRELAYER_OPTIONS, default="none",
                   help="a first layer before the attention layer: mean-shift is Proposition 4's (every token "
                        "plus its context's mean), for queries that fail A1 while x + mean(E) meets it (A3), "
                        "repeated queries for instance; auto uses it only where it is needed and the shifted "
                        "queries meet A1; the weights file and the report name it (default none)")
    b.add_argument("--seed", type=_seed, default=0, help="seed of every random draw (default 0)")
    b.add_argument("--precision", type=_precision, default="auto", metavar="{auto,float64,BITS}",
                   help="arithmetic of the construction: auto (float64 unless docs/math.md §5 predicts it "
                        "cannot hold it), float64, or mpmath with BITS bits, at any size: a note on stderr "
                        "when that is beyond the size auto uses mpmath for (default auto)")
    b.add_argument("--scale", choices=SCALES, default="rank",
                   help="saturation scales: the smallest that keeps the rank (default), the smallest that "
                        "keeps the proof's saturation argument, or the explicit bound of docs/math.md §4.4.5; "
                        "the report shows the explicit bound beside the scale used")
    b.add_argument("--out", type=_path, required=True,
                   help="folder for weights.npz, data.npz, report.json, replaced as one set")
    b.add_argument("--force", action="store_true",
                   help="replace the --out folder even if it holds other files (they are removed)")
    b.add_argument("--synthetic", choices=SYNTHETIC_KINDS, help="build a synthetic problem")
    b.add_argument("--dataset", choices=("digits", "tokens"),
                   help="build a built-in dataset: digits (scikit-learn's 8x8 images as 4 patch tokens, the [data] "
                        "extra; --examples images, default 301) or tokens (--examples sequences of n = 8 distinct "
                        "tokens in d = 16 from a vocabulary of 64, 4 random classes, query = last token, default "
                        "200); prints the dataset's assumptions report first, as the assumptions command does")
    b.add_argument("--context", type=_positive, help="synthetic: context size n (default 8)")
    b.add_argument("--dim", type=_positive, help="synthetic: token dimension d (default 16)")
    b.add_argument("--examples", type=_positive, help="synthetic: T (default: the capacity H(k-1)+1); with --dataset: how many images or sequences")
    b.add_argument("--out-dim", type=_positive, help="synthetic: label dimension d_o (default 1)")
    b.add_argument("--positional", action="store_true", help="synthetic: add sinusoidal positional encoding")
    b.add_argument("--tol", type=_number, default=DEFAULT_TOL,
                   help=f"allowed max |f-y| relative to max(1, max|Y|) (default {DEFAULT_TOL:g})")
    b.add_argument("--quiet", action="store_true", help="print nothing on success")
    _device_option(b)
    b.set_defaults(run=_cmd_build)

    v = sub.add_parser("verify", help="check that weights memorize a dataset",
                       description="Recompute Z and the outputs from the two files; exit 0 only if every label "
                                   "is reproduced within the tolerance and rank Z = T.")
    v.add_argument("weights", type=_path, help="the weights (.npz, as build writes them)")
    v.add_argument("data", type=_path, help="the dataset (.npz with E, X and Y or labels)")
    v.add_argument("--tol", type=_number, default=DEFAULT_TOL,
                   help=f"allowed max |f-y| relative to max(1, max|Y|) (default {DEFAULT_TOL:g})")
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    _device_option(v)
    v.set_defaults(run=_cmd_verify)

    c = sub.add_parser("certify", help="prove rank Z = T and bound max |f - y| for the exact model")
    c.add_argument("weights", type=_path, help="the weights (.npz, as build writes them)")
    c.add_argument("data", type=_path, help="the dataset (.npz with E, X and Y or labels)")
    c.add_argument("--out", type=_file, help="write the certificate (JSON) here")
    c.add_argument("--check", type=_file, metavar="CERT.json",
                   help="instead, re-prove every claim of an existing certificate for these files")
    c.add_argument("--tol", type=_number, default=None,
                   help=f"memorization claim: max |f-y| <= tol * max(1, max|Y|) (default {DEFAULT_TOL:g})")
    c.add_argument("--method", choices=METHODS, default=None,
                   help="float64 enclosures (fast, any size), mpmath intervals (tight, small problems), or "
                        "auto: float64 first, intervals when a claim is unproven and the problem fits")
    c.set_defaults(run=_cmd_certify)

    e = sub.add_parser("export", help="write the weights for PyTorch, safetensors or ONNX",
                       description="Write the weights for another framework and, with a dataset (--data, or "
                                   "data.npz beside the weights), evaluate the written file in its target library.")
    e.add_argument("weights", type=_path, help="the weights (.npz, as build writes them)")
    e.add_argument("--format", choices=("torch", "safetensors", "onnx"), required=True,
                   help="a PyTorch state dict, safetensors arrays with metadata, or an ONNX graph")
    e.add_argument("--out", type=_file, required=True, help="the file to write")
    e.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="the file's number type (default float64: the weights' own values)")
    e.add_argument("--data", type=_path, help="dataset to evaluate the export on (default: data.npz beside the weights)")
    e.add_argument("--tol", type=_number, help="tolerance of the labels check, relative as verify's "
                                             "(default 1e-8 for float64, 1e-4 for float32); refused where "
                                             "there is no dataset to check")
    e.set_defaults(run=_cmd_export)

    k = sub.add_parser("capacity", help="sweep H, n or d_h: bound, certified examples, generic rank of Z",
                       description="For each value: Theorem 1's bound H(k-1)+1, the examples the construction "
                                   "builds and certifies there, and rank Z for random weights (which exceeds the "
                                   "bound on independent contexts, and cannot on shared ones).")
    k.add_argument("--vary", choices=("H", "n", "d_h"), required=True, help="the quantity swept")
    k.add_argument("--values", type=_positive, nargs="+", required=True, help="its values, one point each")
    k.add_argument("--kind", choices=("independent", "shared"), nargs="+", default=["independent"],
                   help="context kinds: a fresh context per example, or one for all (default independent)")
    k.add_argument("--heads", type=_positive, help="H when not varied (default 4)")
    k.add_argument("--context", type=_positive, help="n when not varied (default 32)")
    k.add_argument("--dim", type=_positive, help="d (default 64)")
    k.add_argument("--head-dim", type=_positive, help="d_h when not varied (default n)")
    k.add_argument("--seed", type=_seed, default=0, help="seed of the data and the construction (default 0)")
    k.add_argument("--csv", type=_file, help="write the table as CSV")
    k.add_argument("--json", type=_file, help="write the table as JSON")
    k.add_argument("--plot", type=_file, nargs="+", help="draw it (.svg or .png; [plot] extra): with two kinds, one file per kind, "
                                                              "NAME-independent.svg and NAME-shared.svg")
    k.set_defaults(run=_cmd_capacity)

    t = sub.add_parser("teach", help="run the construction on a tiny dataset and narrate every step")
    t.add_argument("--heads", type=_positive, default=3, help="H (default 3)")
    t.add_argument("--context", type=_positive, default=3, help="n (default 3)")
    t.add_argument("--dim", type=_positive, default=4, help="d (default 4)")
    t.add_argument("--seed", type=_seed, default=0, help="seed of the data and the construction (default 0)")
    t.add_argument("--shared", action="store_true", help="one context for every example (Prop. 2)")
    t.add_argument("--rational", action="store_true", help="exact rational inputs, small matrices shown exactly")
    t.add_argument("--prelayer", action="store_true",
                   help="queries that repeat (A1 fails; A3 holds where the sizes allow, else the construction's own "
                        "condition), built through Proposition 4's pre-layer")
    t.add_argument("--format", choices=("text", "markdown", "html"), default="text",
                   help="plain (styled on a terminal unless NO_COLOR is set) text, Markdown, or one "
                        "self-contained HTML page")
    t.add_argument("--out", type=_path, help="write teach.txt / teach.md / teach.html into this folder (markdown: "
                   "with its figures as teach-figure-N.svg beside it, removing those of an earlier, longer page; "
                   "without --out it has no figures)")
    t.set_defaults(run=_cmd_teach)

    a = sub.add_parser("assumptions", help="report A1, A2, A3 and general position for a dataset")
    a.add_argument("data", type=_path, help="the dataset (.npz with E, X and Y or labels)")
    a.add_argument("--trials", type=_positive, default=5000, help="sampled subsets per test (default 5000)")
    a.add_argument("--seed", type=_seed, default=0, help="seed of the sampled subsets (default 0)")
    a.add_argument("--json", action="store_true", help="print the report as JSON")
    a.add_argument("--report-only", action="store_true",
                   help="exit 0 whatever the verdict (by default the exit code is 1 when A1 or A2 fails, or "
                        "the labels have more columns than the tokens)")
    a.set_defaults(run=_cmd_assumptions)
    for name, command in sub.choices.items():              # every subcommand: a description and examples
        command.description = textwrap.fill(command.description or _HELP[name], 88)
        command.epilog = "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[name]) + \
            f"\n\nmore: docs/cli.md#{name} in the project's repository"
        command.formatter_class = argparse.RawDescriptionHelpFormatter
    return p


# Each subcommand's examples, shown at the end of its --help (and in docs/cli.md).
EXAMPLES = {
    "build": ["mha-construct build --out run                      # the default problem (H = 8, n = 8, d = 16)",
              "mha-construct build mydata.npz --out run           # your E, X, Y (or labels); the fewest heads",
              "mha-construct build --dataset digits --examples 1797 --out digits",
              "mha-construct build --dataset tokens --prelayer auto --out tokens"],
    "verify": ["mha-construct verify run/weights.npz run/data.npz",
               "mha-construct verify run/weights.npz run/data.npz --json --tol 1e-10"],
    "certify": ["mha-construct certify run/weights.npz run/data.npz --out run/certificate.json",
                "mha-construct certify run/weights.npz run/data.npz --check run/certificate.json",
                "mha-construct certify run/weights.npz run/data.npz --method interval"],
    "export": ["mha-construct export run/weights.npz --format torch --out model.pt",
               "mha-construct export run/weights.npz --format onnx --dtype float32 --out model.onnx"],
    "capacity": ["mha-construct capacity --vary H --values 1 2 4 8 16 32 --kind independent shared",
                 "mha-construct capacity --vary n --values 4 8 16 32 --csv n.csv --plot n.svg"],
    "teach": ["mha-construct teach",
              "mha-construct teach --heads 4 --context 3 --dim 5 --format html --out lesson",
              "mha-construct teach --prelayer"],
    "assumptions": ["mha-construct assumptions run/data.npz",
                    "mha-construct assumptions mydata.npz --json --report-only"],
}
_HELP = {
    "certify": "Prove, for the exact model (not its floating-point evaluation), that rank Z = T and that "
               "max |f - y| is within the tolerance (and, for one-hot labels, that no example is "
               "misclassified); or re-prove an existing certificate with --check. Exit 0 when every claim "
               "is proven.",
    "teach": "Run the construction on a tiny dataset and narrate every step of the proof with the engine's "
             "own numbers, as text, Markdown or one self-contained HTML page.",
    "assumptions": "Report A1 (the queries' Kruskal rank, exact when small, else sampled as the paper does), "
                   "A2 (full-rank contexts), A3 (the queries shifted by their contexts' means) and general "
                   "position, and that the labels have at most d columns. Exit 1 when A1 or A2 fails or d_o > d.",
}


def _escape_what_stdout_cannot_encode():
    """Write what stdout cannot encode as backslash escapes, as stderr does, rather than stop with
    UnicodeEncodeError after the work is done: characters its encoding lacks (``…``, ``≥``, ``ℝ``
    with ``PYTHONIOENCODING=ascii`` or a Latin-1 terminal), and a file name's byte that is not
    UTF-8 (a lone surrogate, which even UTF-8 refuses)."""
    stream = sys.stdout
    if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
        try:                                    # (UTF-8 too: a file name's undecodable byte)
            stream.reconfigure(errors="backslashreplace")
        except (ValueError, OSError, TypeError):
            return lambda: None
        return lambda: stream.reconfigure(errors="strict")    # main called in a process that goes on
    return lambda: None


class _Stdout:
    """``sys.stdout`` while a command runs: once the reader of a pipe has gone (``| head -1``),
    the rest of the output is dropped and the command runs to its end, its files written and its
    exit code its verdict. The stream's descriptor then points at ``/dev/null``, so that the
    interpreter's last flush of what the pipe refused raises nothing either."""

    def __init__(self, stream):
        self._stream = stream
        self._gone = False

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._reader_gone()
            except OSError as exc:                     # a full disk (`> /dev/full`), an I/O error
                raise self._failed(exc) from None
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_gone()
            except OSError as exc:
                raise self._failed(exc) from None

    def _failed(self, exc: OSError) -> OutputError:
        """Standard output refused a write: the message names it, and what the command had put in
        place by then (a build's folder, a certificate), which stays."""
        self._gone = True                              # nothing more is written there
        code = f" [Errno {exc.errno}]" if exc.errno else ""
        return OutputError(f"cannot write to standard output: {exc.strerror or exc}{code}; {_what_was_written()}")

    def _reader_gone(self) -> None:
        self._gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):   # a stream without a descriptor (a test's)
            pass

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def console() -> int:
    """The ``mha-construct`` console script (and ``python -m construct``): :func:`main`, then
    SIGINT and SIGTERM ignored while the interpreter exits. The command is done and its exit
    code stands: Python restores their default actions as it finalizes, and the teardown of
    onnxruntime or torch took up to half a second, in which Ctrl-C killed the process by the
    signal, without a word; a teardown that hangs then needs SIGKILL. (Not :func:`main` itself,
    which a program may call and go on.)"""
    try:
        return main()
    finally:
        if threading.current_thread() is threading.main_thread():    # signal() works only there
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_IGN)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mha-construct`` command line; returns the exit code."""
    restore = _escape_what_stdout_cannot_encode()
    io = sys.modules.get(f"{__package__}.io")           # imported by an earlier command in this process
    if io is not None:
        io.published.clear()                  # what this command writes, named if it is interrupted
    before = _stop_on_sigterm()
    try:
        with signals_held():    # an extension module interrupted as it loads can fail as an ImportError
            for name in ("build", "verify", "certify"):          # NumPy, SciPy: what the options read
                importlib.import_module(f"{__package__}.{name}")
        return _main(argv)
    except KeyboardInterrupt as exc:         # outside the command: its imports and options, or its end
        stop = "terminated (SIGTERM)" if isinstance(exc, _Terminated) else "interrupted"
        _tell(f"mha-construct: {stop}{_what_was_written(' after writing ')}")
        return 143 if isinstance(exc, _Terminated) else 130
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)
        try:
            restore()
        except (ValueError, OSError):
            pass


def _tell(message: str) -> None:
    """``message`` on standard error, where it can be written: a full disk or a closed stream
    under it must not turn the command's exit code (2 for bad input or an output not written)
    into Python's 1 for an exception in the handler. Where it cannot, standard error becomes
    the null device, so that Python's own flush of it at exit does not fail again (exit 120)."""
    try:
        print(message, file=sys.stderr)
        if sys.stderr is not None:
            sys.stderr.flush()
    except (OSError, ValueError):
        try:
            sys.stderr = open(os.devnull, "w")
        except OSError:
            pass


def _main(argv: list[str] | None) -> int:
    try:
        args = _parser().parse_args(argv)
    except _HelpNotWritten as failed:
        exc = failed.args[0]
        if isinstance(exc, BrokenPipeError):  # --help | head -1: the reader has what it wanted
            _Stdout(sys.stdout)._reader_gone()
            return 0
        code = f" [Errno {exc.errno}]" if exc.errno else ""     # a full disk
        _tell(f"mha-construct: error: cannot write to standard output: {exc.strerror or exc}{code}")
        return 2
    vars(args).pop("_given", None)
    saved = sys.stdout
    if saved is not None:                     # None where fd 1 is closed (`>&-`): print writes nothing
        sys.stdout = _Stdout(saved)
    try:
        code = args.run(args)
        if sys.stdout is not None:
            sys.stdout.flush()                # a full disk under stdout is named here, not lost
        return code
    except (InputError, OutputError) as exc:
        _tell(f"mha-construct {args.command}: error: {exc}")
        return 2
    except ConstructError as exc:
        _tell(f"mha-construct {args.command}: error: {exc}")
        return 1
    except OSError as exc:
        _tell(f"mha-construct {args.command}: error: {exc}")
        return 2
    except MemoryError:
        _tell(f"mha-construct {args.command}: error: out of memory; {_what_was_written()}")
        return 2
    except KeyboardInterrupt as exc:
        stop = "terminated (SIGTERM)" if isinstance(exc, _Terminated) else "interrupted"
        _tell(f"mha-construct {args.command}: {stop}{_what_was_written(' after writing ')}")
        return 143 if isinstance(exc, _Terminated) else 130
    finally:
        if sys.stdout is not None:
            try:
                sys.stdout.flush()
            except OSError:                   # named above where it could be; the code is given
                pass
        sys.stdout = saved


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a batch scheduler's time limit, ``kill``), raised where the command is, so that it
    stops as on Ctrl-C: what it was writing removed, its folder's lock released, a message."""


def _on_sigterm(signum, frame):
    raise _Terminated


def _stop_on_sigterm():
    """Make SIGTERM raise :class:`_Terminated` while a command runs; returns the handler to put
    back (None where nothing was changed: a handler of the caller's, or not the main thread)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGTERM"):
        return None
    before = signal.getsignal(signal.SIGTERM)
    if before is not signal.SIG_DFL:
        return None
    signal.signal(signal.SIGTERM, _on_sigterm)
    return before


def _what_was_written(lead: str = "") -> str:
    """What this command put in place before it stopped (``io.published``), or that nothing was
    (where the module that writes was not even imported)."""
    io = sys.modules.get(f"{__package__}.io")
    published = io.published if io is not None else []
    if not published:
        return "; nothing written" if lead else "nothing written"
    return f"{lead}{', '.join(published)}" if lead else f"already written: {', '.join(published)}"


if __name__ == "__main__":
    sys.exit(main())
