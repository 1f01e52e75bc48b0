"""What the benchmark modules share: a command line from a table of options, and the one JSON object
each prints on stdout (bench/suite.py records the last one)."""
import argparse
import functools
import json


def parser(doc: str, options) -> argparse.ArgumentParser:
    """A parser described by ``doc``'s first paragraph, one --flag per (flag, default[, help[, add_argument
    keywords]]) of ``options``, of its default's type: a bool is a switch, a list a comma-separated list
    of its first item's type (each item one of its ``choices`` if given)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    for flag, default, *more in options:
        kw = {"help": more[0] if more else None, **(more[1] if len(more) > 1 else {})}
        if isinstance(default, bool):
            kw.setdefault("action", "store_true")
        elif isinstance(default, list):
            kw.setdefault("type", functools.partial(csv, kind=type(default[0]) if default else str,
                                                    choices=kw.pop("choices", None)))
        elif isinstance(default, (int, float)):
            kw.setdefault("type", type(default))
        ap.add_argument("--" + flag, default=default, **kw)
    return ap


def csv(text: str, kind=str, choices=None) -> list:
    """The items of a comma-separated option ('' for none), each as ``kind`` and one of ``choices`` if given."""
    items = [kind(x) for x in (text or "").split(",") if x]
    unknown = [x for x in items if choices is not None and x not in choices]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {unknown}; expected some of {list(choices)}")
    return items


def emit(out: dict, indent: int | None = None) -> dict:
    """Prints ``out`` as the benchmark's JSON object (numpy scalars as plain numbers); returns it."""
    print(json.dumps(out, indent=indent, default=lambda o: o.item()))
    return out
