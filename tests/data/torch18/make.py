"""Writes ``worker0.pt.trace.json``: a small synthetic trace in the layout of PyTorch 1.8/1.9's Kineto export.

What marks that era: every CPU event (operators, ``ProfilerStep#N`` and ``record_function`` ranges such as the
DataLoader's ``__next__``) has category ``Operator``; device and runtime events are ``Kernel``, ``Memcpy`` and
``Runtime``; ``External id`` is spelled ``external id`` on runtime and device events; thread ids are strings; the
file ends with a ``Record Window End`` instant. The numbers are chosen so that every figure is known exactly: three
10 ms steps, each with a 3 ms DataLoader fetch, a 4 ms GEMM and a 0.5 ms host-to-device copy (device busy 45%).

Run ``python tests/data/torch18/make.py`` to write it again.
"""

from __future__ import annotations

from pathlib import Path

BASE = 1621401187223005
PID = 29
STEP_US = 10_000


def _event(fields: dict[str, object], args: dict[str, object]) -> str:
    head = ", ".join(f'"{k}": {_value(v)}' for k, v in list(fields.items())[:2])
    rest = ", ".join(f'"{k}": {_value(v)}' for k, v in list(fields.items())[2:])
    inner = ",\n      ".join(f'"{k}": {_value(v)}' for k, v in args.items())
    body = f"    {head}, \n    {rest}"
    if args:
        body += f",\n    \"args\": {{\n      {inner}\n    }}"
    return "  {\n" + body + "\n  }"


def _value(v: object) -> str:
    return f'"{v}"' if isinstance(v, str) else "[]" if v == [] else str(v)


def _op(name: str, ts: int, dur: int, ext: int) -> str:
    return _event({"ph": "X", "cat": "Operator", "name": name, "pid": PID, "tid": str(PID), "ts": ts, "dur": dur},
                  {"Input dims": [], "External id": ext, "Trace name": "PyTorch Profiler", "Trace iteration": 0})


def _runtime(name: str, ts: int, corr: int, ext: int) -> str:
    return _event({"ph": "X", "cat": "Runtime", "name": name, "pid": PID, "tid": str(PID), "ts": ts, "dur": 10},
                  {"correlation": corr, "external id": ext, "external ts": ts})


def _device(cat: str, name: str, ts: int, dur: int, corr: int, ext: int) -> str:
    return _event({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": "stream 7", "ts": ts, "dur": dur},
                  {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": corr, "external id": ext})


def events() -> list[str]:
    out = []
    for i, step in enumerate((5, 6, 7)):
        s, ext, corr = BASE + i * STEP_US, 100 * i + 1, 100 * i + 50
        out += [
            _op(f"ProfilerStep#{step}", s, STEP_US, ext),
            _op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", s + 10, 3000, ext + 1),
            _op("aten::linear", s + 3020, 180, ext + 2),
            _op("aten::addmm", s + 3030, 160, ext + 3),
            _runtime("cudaLaunchKernel", s + 3100, corr, ext + 3),
            _device("Kernel", "volta_sgemm_128x64_nn", s + 3200, 4000, corr, ext + 3),
            _op("aten::copy_", s + 3300, 100, ext + 4),
            _runtime("cudaMemcpyAsync", s + 3310, corr + 1, ext + 4),
            _device("Memcpy", "Memcpy HtoD (Pageable -> Device)", s + 7300, 500, corr + 1, ext + 4),
        ]
    out.append('  {\n    "name": "Record Window End", "ph": "i", "s": "g",\n    "pid": "", "tid": "", "ts": '
               f"{BASE + 3 * STEP_US + 100}\n  }}")
    return out


def main() -> None:
    text = '{\n  "schemaVersion": 1,\n\n  "traceEvents": [\n' + ",\n".join(events()) + "\n]}\n"
    Path(__file__).with_name("worker0.pt.trace.json").write_text(text)


if __name__ == "__main__":
    main()
