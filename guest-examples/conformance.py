#!/usr/bin/env python3
"""Conformance check for configmap-logger guests, on wasmtime 48 (the host's version) via wasmtime-py.

Loads each component with WASI p2 (no preopens, nothing inherited; CONFORMANCE_GUEST_STDERR=1
shows the guests' stderr, e.g. Python tracebacks) plus the
kubewasm:handler log/cache imports, drives the same call sequence through every export, and checks
call for call the log lines and the results (ok / retry / fatal / trap) against the reference
behaviour, and that all components agree with each other. A trap discards the instance and the
next call gets a fresh one, as the host does.

    .toolchains/venv/bin/python guest-examples/conformance.py [--soak N] [COMPONENT.wasm ...]

--soak N: also N on-update calls with two ~2 KB objects on one instance per component.

Without arguments: every guest-examples/dist/*configmap-logger*.wasm. Exit status 0 when all pass.
"""

from __future__ import annotations

import glob
import os
import sys
import time

import wasmtime
from wasmtime import component as wc

FAIL = "kubewasm.io/fail"


class Rec:
    """A record value for wasmtime-py: fields are attributes named as in the WIT (kebab-case)."""

    def __init__(self, **fields):
        for k, v in fields.items():
            setattr(self, k.replace("_", "-"), v)


def obj(namespace, name, rv, labels=()):
    return Rec(
        meta=Rec(
            api_version="v1",
            kind="ConfigMap",
            namespace=namespace,
            name=name,
            uid=f"uid-{name}",
            resource_version=rv,
            generation=None,
            labels=list(labels),
        ),
        json='{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"%s"}}' % name,
    )


def key(o):
    ns = getattr(o.meta, "namespace")
    return f"{ns}/{o.meta.name}" if ns is not None else o.meta.name


def rv(o):
    return getattr(o.meta, "resource-version")


def flag(b):
    return "true" if b else "false"


def expected(export, args):
    """The reference behaviour: (log lines, outcome)."""
    if export == "on-add":
        o, b = args
        line = f"add {key(o)} rv={rv(o)} init={flag(b)}"
    elif export == "on-update":
        old, o, b = args
        line = f"update {key(o)} rv={rv(old)}->{rv(o)} sync={flag(b)}"
    else:
        o, b = args
        line = f"delete {key(o)} rv={rv(o)} final-state-unknown={flag(b)}"
    fail = next((v for k, v in o.meta.labels if k == FAIL), None)
    outcome = {
        "retry": f"err retry({FAIL}=retry)",
        "fatal": f"err fatal({FAIL}=fatal)",
        "trap": "trap",
    }.get(fail, "ok")
    return [("info", line)], outcome


def scenario():
    """(export, args) in the order an informer could deliver them."""
    a1 = obj("default", "a", "1")
    a2 = obj("default", "a", "2", [("app", "web")])
    calls = [
        ("on-add", (a1, True)),
        ("on-add", (obj(None, "cluster-scoped", "7"), False)),
        ("on-update", (a1, a2, False)),
        ("on-update", (a2, a2, True)),
        ("on-delete", (a2, False)),
        ("on-delete", (obj("kube-system", "b", "9"), True)),
        ("on-add", (obj("ns-ü", "名前", "10", [("x", "y")]), False)),
        # the label of the OLD object must not matter for on-update
        ("on-update", (obj("d", "u", "1", [(FAIL, "fatal")]), obj("d", "u", "2"), False)),
        ("on-add", (obj("d", "other-key", "1", [(FAIL + "x", "retry")]), True)),
    ]
    for value in ("retry", "fatal", "something-else", "trap"):
        labels = [("app", "web"), (FAIL, value)]
        calls += [
            ("on-add", (obj("f", f"add-{value}", "3", labels), False)),
            ("on-update", (obj("f", f"upd-{value}", "3"), obj("f", f"upd-{value}", "4", labels), True)),
            ("on-delete", (obj("f", f"del-{value}", "4", labels), True)),
            ("on-add", (obj(None, "after", "5"), True)),
        ]
    return calls


COMPILED = {}
MEMORY_CAP = 64 << 20  # the host's default linear-memory cap per plugin


class Guest:
    def __init__(self, engine, path):
        self.engine = engine
        self.path = path
        t = time.perf_counter()
        if path not in COMPILED:
            COMPILED[path] = wc.Component.from_file(engine, path)
        self.component = COMPILED[path]
        self.compile_s = time.perf_counter() - t
        self.linker = wc.Linker(engine)
        self.linker.add_wasip2()
        self.logs = []
        with self.linker.root() as root:
            with root.add_instance("kubewasm:handler/log@0.1.0") as li:
                li.add_func("log", lambda _store, level, message: self.logs.append((level, message)))
            with root.add_instance("kubewasm:handler/cache@0.1.0") as ci:
                ci.add_func("get", lambda _store, *a: wc.Variant("err", "not subscribed"))
                ci.add_func("list", lambda _store, *a: wc.Variant("err", "not subscribed"))
        self.instances = 0
        self.instantiate_s = []
        self.store = self.instance = None

    def fresh(self):
        self.store = wasmtime.Store(self.engine)
        wasi = wasmtime.WasiConfig()
        if os.environ.get("CONFORMANCE_GUEST_STDERR"):
            wasi.inherit_stderr()
        self.store.set_wasi(wasi)
        self.store.set_limits(memory_size=MEMORY_CAP)
        t = time.perf_counter()
        self.instance = self.linker.instantiate(self.store, self.component)
        self.instantiate_s.append(time.perf_counter() - t)
        self.instances += 1

    def call(self, name, *args):
        if self.instance is None:
            self.fresh()
        f = self.instance.get_func(self.store, name)
        try:
            r = f(self.store, *args)
        except wasmtime.WasmtimeError as e:
            self.instance = None  # a trapped instance is discarded, as the host does
            return "trap", str(e).splitlines()[-1]
        f.post_return(self.store)
        return "ok", r


def describe_str(info):
    subs = [
        "{%s}" % ", ".join(f"{k}={getattr(s, k)!r}" for k in (
            "api-version", "kind", "namespace", "label-selector", "field-selector", "resync-period-ms"))
        for s in info.subscriptions
    ]
    return f"name={info.name!r} subscriptions=[{', '.join(subs)}]"


EXPECTED_DESCRIBE = (
    "name='configmap-logger' subscriptions=[{api-version='v1', kind='ConfigMap', namespace=None, "
    "label-selector=None, field-selector=None, resync-period-ms=0}]"
)


def run(engine, path):
    """Returns (transcript, failures, figures)."""
    g = Guest(engine, path)
    failures = []
    transcript = []
    status, info = g.call("describe")
    got = describe_str(info) if status == "ok" else f"trap {info}"
    transcript.append(("describe", got))
    if got != EXPECTED_DESCRIBE:
        failures.append(f"describe: got {got}, want {EXPECTED_DESCRIBE}")
    for i, (export, args) in enumerate(scenario()):
        g.logs.clear()
        status, r = g.call(export, *args)
        if status == "trap":
            outcome = "trap"
        elif r is None:
            outcome = "ok"
        elif isinstance(r, wc.Variant) and r.tag in ("retry", "fatal"):
            outcome = f"err {r.tag}({r.payload})"
        else:
            outcome = f"unexpected return {r!r}"
        want_logs, want_outcome = expected(export, args)
        got_logs = list(g.logs)
        transcript.append((export, got_logs, outcome))
        if got_logs != want_logs or outcome != want_outcome:
            failures.append(
                f"call {i} {export}: got {got_logs} -> {outcome}, want {want_logs} -> {want_outcome}"
                + (f" ({r})" if status == "trap" and want_outcome != "trap" else "")
            )
    figures = {
        "size_bytes": os.path.getsize(path),
        "compile_ms": g.compile_s * 1e3,
        "instantiate_ms": min(g.instantiate_s) * 1e3,
        "instances": g.instances,
    }
    return transcript, failures, figures


def soak(engine, path, n):
    """n on-update calls with two ~2 KB objects on one instance: every call must log one line and
    return ok (catches leaks that exhaust memory and GC-in-realloc traps). Returns (failures, us/call)."""
    g = Guest(engine, path)
    data = "x" * 1900
    labels = [("app", "web"), ("tier", "frontend")]
    old = obj("soak", "cm", "1", labels)
    new = obj("soak", "cm", "2", labels)
    old.json = new.json = '{"kind":"ConfigMap","data":{"k":"%s"}}' % data
    t = time.perf_counter()
    for i in range(n):
        g.logs.clear()
        status, r = g.call("on-update", old, new, i % 2 == 0)
        if status != "ok" or r is not None or len(g.logs) != 1:
            return [f"soak call {i}: {status} {r!r} logs={g.logs}"], 0.0
    return [], (time.perf_counter() - t) / n * 1e6


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    soak_n = 0
    if argv[:1] == ["--soak"]:
        soak_n = int(argv[1])
        argv = argv[2:]
    paths = argv or sorted(glob.glob(os.path.join(here, "dist", "*configmap-logger*.wasm")) + glob.glob(os.path.join(here, "dist", "variants", "*configmap-logger*.wasm")))
    if not paths:
        print("no components given and none in guest-examples/dist", file=sys.stderr)
        return 2
    engine = wasmtime.Engine()
    passed = failed = 0
    transcripts = {}
    for path in paths:
        name = os.path.basename(path)
        try:
            transcript, failures, fig = run(engine, path)
        except Exception as e:  # noqa: BLE001 - report a guest that cannot even load
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            failed += 1
            continue
        transcripts[name] = transcript
        if failures:
            failed += 1
            print(f"FAIL {name}")
            for f in failures:
                print(f"  {f}")
        else:
            passed += 1
            print(
                f"ok   {name}: {len(transcript)} calls as the reference; size {fig['size_bytes'] / 1e6:.2f} MB, "
                f"compile {fig['compile_ms']:.0f} ms, instantiate {fig['instantiate_ms']:.2f} ms "
                f"({fig['instances']} instances, traps discarded)"
            )
    for path in paths if soak_n else []:
        name = os.path.basename(path)
        failures, us = soak(engine, path, soak_n)
        if failures:
            failed += 1
            print(f"FAIL {name} soak: {failures[0]}")
        else:
            passed += 1
            print(f"ok   {name}: soak of {soak_n} on-update calls, {us:.0f} us/call (incl. wasmtime-py marshalling)")
    # Everyone must also agree with everyone else (catches a shared mistake in `expected`).
    if len(transcripts) > 1:
        names = list(transcripts)
        first = transcripts[names[0]]
        for n in names[1:]:
            if transcripts[n] != first:
                failed += 1
                print(f"FAIL {n} differs from {names[0]}")
            else:
                passed += 1
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
